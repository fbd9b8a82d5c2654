package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Config configures a node. Zero values take the defaults named.
type Config struct {
	NodeID  string
	Env     string // default "default"
	Version string
	Address string // the node's HTTP API, as other nodes reach it
	Slots   int
	Roles   []string // default access, compute
	// Prefix of the node's etcd keys. Default DefaultPrefix.
	Prefix string
	Bots   []config.Bot
	// WeCom is the connection template: URL and timings. BotID, Secret and
	// Logger are set per bot.
	WeCom wecom.Config
	// Election is the election template: TTL and margins. BotID, NodeID,
	// Logger and (with DataDir) LeaseFile are set per bot. Validated by New.
	Election election.Config
	// DataDir, if set, is the node's data dir: each bot's election lease is
	// kept in DataDir/election/<bot>.lease, and the next run revokes it
	// before campaigning, so after a crash and a restart a standby takes
	// over at once instead of after the election TTL. Give every node its
	// own (two nodes sharing one would revoke each other's leases).
	DataDir string
	// RegistryTTL is the node registration's lease TTL. Default 10s.
	RegistryTTL time.Duration
	// AuthBackoff is the first wait after a needs_human verdict (an auth
	// failure, or KickLimit foreign kicks), doubling up to AuthBackoffMax.
	// Defaults 30s and 10m. After an auth failure it resets after a
	// connected term (the credentials worked); after foreign kicks, after
	// a connected term of StableTerm without a kick.
	AuthBackoff, AuthBackoffMax time.Duration
	// KickLimit is how many kicks by a connection outside the cluster
	// (this node still held the bot's election when WeCom replaced its
	// connection: another holder of the bot's credentials) within
	// KickWindow mark the bot needs_human instead of reconnecting, which
	// would kick the other holder in turn, and so on. Defaults 3 and 10m.
	// Kicks by the cluster's own new leader (this node had lost its term)
	// do not count.
	KickLimit  int
	KickWindow time.Duration
	// Backoff is the first wait after a term that was not a stable
	// connection (verify or dial failed, a non-auth subscribe error, a
	// connection that ended or was kicked before StableTerm) and after an
	// etcd error in the loop; it doubles up to BackoffMax while that keeps
	// happening. Each wait is drawn between half and all of the current
	// step (jitter), so nodes that fail together spread apart. Defaults
	// 500ms and 30s. A connected term that lasted StableTerm (default 1m)
	// resets it. Lower Backoff recovers sooner from a one-off failure;
	// BackoffMax bounds how long a bot stays down after its WeCom endpoint
	// comes back, and against it how much a long outage costs: every
	// unsuccessful term writes to etcd (lease, key, leader events, registry,
	// about ten revisions), so a node makes at most one such term per
	// BackoffMax/2 once the step has grown. BackoffMax must be at least
	// Backoff.
	Backoff, BackoffMax, StableTerm time.Duration
	// Hooks, if set, is a connected term's work: the pusher on the
	// connection, then the inbound drain (see TermHooks). Nil: the node
	// only holds the connection, and resigns as soon as it is gone.
	Hooks TermHooks
	// DrainTimeout bounds TermHooks.Drain. Default 15s
	// (DefaultDrainTimeout). Raise it if handlers may take longer (a slow
	// JetStream); the bot has no connection while Drain runs, so it also bounds how long a graceful stop delays the
	// takeover. Whatever is still unhandled at the deadline is recovered by
	// the next leader's gap backfill.
	DrainTimeout time.Duration
	// SpreadDelay is how long a node waits before campaigning for each bot
	// it already leads, so that several bots spread over nodes instead of
	// all going to the first node up, and how far apart it first
	// campaigns for its bots at its start. Default 1s; set it below the
	// TTL. With many bots the step is shorter: see SpreadWindow.
	SpreadDelay time.Duration
	// SpreadWindow bounds the start's spread: the step is the smaller of
	// SpreadDelay and SpreadWindow divided by the bots the node serves,
	// so a node of a thousand bots joins every election within about
	// SpreadWindow (and waits at most about that for the bots it leads)
	// rather than a thousand SpreadDelays. Default 15s.
	SpreadWindow time.Duration
	// Balance is the balancer (balancer.go): leadership kept within a
	// tolerance of every node's even share.
	Balance BalanceConfig
	// Inbound handles callbacks; nil drops them (logging each).
	Inbound Inbound
	// Health, if set, hears every connection attempt and end (pkg/heal/health's
	// monitor: the health record, incidents and recovery).
	Health Observer
	// Metrics, if set, counts the node's failed etcd requests.
	Metrics Metrics
	// Skew, if set, says when this node's clock is too far off to be
	// trusted (pkg/skew): the node then campaigns for no bot.
	Skew Skew
	// DataPlane, if set, says whether this node's JetStream fails while
	// its connection is up: registered (Info.JetStreamFailing) for the
	// other nodes to read. Call Refresh when it changes.
	DataPlane interface{ Failing() bool }
	Logger    zerolog.Logger
	// Clock is what the node's recheck of Skew waits on. Default
	// clock.Real.
	Clock clock.Clock
}

func (c *Config) setDefaults() {
	if c.Env == "" {
		c.Env = "default"
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if len(c.Roles) == 0 {
		c.Roles = []string{"access", "compute"}
	}
	if c.RegistryTTL <= 0 {
		c.RegistryTTL = 10 * time.Second
	}
	if c.AuthBackoff <= 0 {
		c.AuthBackoff = 30 * time.Second
	}
	if c.AuthBackoffMax <= 0 {
		c.AuthBackoffMax = 10 * time.Minute
	}
	if c.KickLimit <= 0 {
		c.KickLimit = 3
	}
	if c.KickWindow <= 0 {
		c.KickWindow = 10 * time.Minute
	}
	if c.Backoff <= 0 {
		c.Backoff = 500 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 30 * time.Second
	}
	if c.StableTerm <= 0 {
		c.StableTerm = time.Minute
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.SpreadDelay <= 0 {
		c.SpreadDelay = time.Second
	}
	if c.SpreadWindow <= 0 {
		c.SpreadWindow = 15 * time.Second
	}
	c.Balance.setDefaults()
}

// Node runs every bot's loop on one process.
type Node struct {
	cfg     Config
	cli     *clientv3.Client
	log     zerolog.Logger
	started time.Time

	mu     sync.Mutex
	status map[string]BotStatus
	dirty  chan struct{} // registration needs rewriting
	// records are leader event writes in flight (they never hold up the
	// loop: a failover must not wait for an operator's record).
	records sync.WaitGroup
	// loops are the bots this node serves, each with its loop (fleet.go);
	// runCtx is Run's context while Run runs (nil before it and after).
	loops  map[string]*loop
	runCtx context.Context
	loopWG sync.WaitGroup
	// pulse is the node's liveness pulse for every bot it leads (one
	// etcd write per PulseInterval, election.Batch); nil with the pulse
	// off.
	pulse *election.Batch
	// newer follows the registered nodes' builds for every standby's
	// "newer node first" (builds.go).
	newer *buildWatch
}

// New validates cfg (every bot's election config included).
func New(cli *clientv3.Client, cfg Config) (*Node, error) {
	cfg.setDefaults()
	if cfg.NodeID == "" {
		return nil, errors.New("node: NodeID is required (set --node-id)")
	}
	if cfg.WeCom.URL == "" && len(cfg.Bots) > 0 {
		return nil, errors.New("node: WeCom URL is required when bots are configured (set --wecom-url)")
	}
	if cfg.BackoffMax < cfg.Backoff {
		return nil, fmt.Errorf("node: BackoffMax (%s) must be at least Backoff (%s)", cfg.BackoffMax, cfg.Backoff)
	}
	if err := cfg.Balance.validate(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg: cfg, cli: cli, started: time.Now().UTC(),
		log:    cfg.Logger.With().Str("node", cfg.NodeID).Logger(),
		status: map[string]BotStatus{},
		dirty:  make(chan struct{}, 1),
		loops:  map[string]*loop{},
	}
	n.newer = newBuildWatch(n)
	if !cfg.Election.NoPulse && cfg.Election.Batch == nil && cli != nil {
		b, err := election.NewBatch(cli, election.BatchConfig{NodeID: cfg.NodeID, NodePulsePrefix: cfg.Election.NodePulsePrefix,
			PulseInterval: cfg.Election.PulseInterval, HedgeAfter: cfg.Election.HedgeAfter, Logger: cfg.Logger, Clock: cfg.Election.Clock})
		if err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
		n.pulse, n.cfg.Election.Batch = b, b
	}
	for i, b := range cfg.Bots {
		if _, err := election.New(cli, n.electionConfig(b.ID)); err != nil {
			return nil, fmt.Errorf("node: bot %s: %w", b.ID, err)
		}
		n.addLocked(b, i)
	}
	return n, nil
}

// etcdError reports a failed etcd request of op to Config.Metrics.
func (n *Node) etcdError(op string) {
	if n.cfg.Metrics != nil {
		n.cfg.Metrics.EtcdError(op)
	}
}

func (n *Node) electionConfig(bot string) election.Config {
	ec := n.cfg.Election
	ec.BotID, ec.NodeID = bot, n.cfg.NodeID
	if n.cfg.DataDir != "" {
		ec.LeaseFile = filepath.Join(n.cfg.DataDir, "election", bot+".lease")
	}
	ec.Logger = n.cfg.Logger // election adds bot and node
	return ec
}

// Status is this node's view of its bots.
func (n *Node) Status() map[string]BotStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]BotStatus, len(n.status))
	for k, v := range n.status {
		out[k] = v
	}
	return out
}

// spreadStep is the start's spread between two bots, and the wait before
// campaigning per bot led: SpreadDelay, or less with many bots
// (SpreadWindow).
func (n *Node) spreadStep() time.Duration {
	n.mu.Lock()
	bots := len(n.loops)
	n.mu.Unlock()
	return min(n.cfg.SpreadDelay, n.cfg.SpreadWindow/time.Duration(max(1, bots)))
}

// leading counts the bots this node leads or is connecting.
func (n *Node) leading() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for _, st := range n.status {
		if st.State == StateLeader || st.State == StateConnecting {
			k++
		}
	}
	return k
}

// clockRecheck is how often a node whose clock is off looks again.
const clockRecheck = 10 * time.Second

// clockOff: Config.Skew says this node's clock is not to be trusted.
func (n *Node) clockOff() (string, bool) {
	if n.cfg.Skew == nil {
		return "", false
	}
	return n.cfg.Skew.Off()
}

// errClockOff ends a candidacy or a term when this node's clock goes off.
var errClockOff = errors.New("this node's clock is off (nats.max_clock_skew)")

// waitClockOff returns true once Config.Skew says the clock is off,
// looking every clockRecheck; false when ctx ends first (or no Skew).
func (n *Node) waitClockOff(ctx context.Context) bool {
	if n.cfg.Skew == nil {
		return false
	}
	t := clock.Or(n.cfg.Clock).NewTicker(clockRecheck)
	defer t.Stop()
	for {
		if _, off := n.cfg.Skew.Off(); off {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C():
		}
	}
}

// state is this node's current state of bot.
func (n *Node) state(bot string) BotState {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.status[bot].State
}

func (n *Node) setState(bot string, st BotState, reason string, term int64) {
	n.mu.Lock()
	n.status[bot] = BotStatus{State: st, Since: time.Now().UTC(), Reason: reason, TermRev: term}
	n.mu.Unlock()
	select {
	case n.dirty <- struct{}{}:
	default:
	}
}

// Info is this node's registration record.
func (n *Node) Info() Info {
	host, _ := os.Hostname()
	return Info{
		ID: n.cfg.NodeID, Address: n.cfg.Address, Version: n.cfg.Version, Env: n.cfg.Env,
		Slots: n.cfg.Slots, Roles: n.cfg.Roles, Started: n.started, Bots: n.Status(),
		Host: host, PID: os.Getpid(), JetStreamFailing: n.cfg.DataPlane != nil && n.cfg.DataPlane.Failing(),
		Weight: n.cfg.Balance.Weight, Balance: n.cfg.Balance.settings(),
	}
}

// Refresh rewrites the node's registration (Config.DataPlane changed).
func (n *Node) Refresh() { n.markDirty() }

// The bounds of a graceful stop's steps in Run, in their order: every
// term at once drains its connection's callbacks (Config.DrainTimeout),
// resigns, and records that it did; then the registration is removed.
// pkg/serve adds its own steps (serve.GracefulStopBound), which the
// unit's TimeoutStopSec must exceed: a stop killed before the resign
// leaves the bot to a standby's deposition instead of a handover.
const (
	// DefaultDrainTimeout is Config.DrainTimeout's default.
	DefaultDrainTimeout = 15 * time.Second
	// ResignTimeout bounds a term's resign.
	ResignTimeout = 5 * time.Second
	// LeaderEventTimeout bounds the etcd write of one leader event
	// (Run waits for the last ones, "resigned" among them).
	LeaderEventTimeout = 2 * time.Second
	// RevokeTimeout bounds the revoke of the registry's lease.
	RevokeTimeout = 2 * time.Second
)

// Run registers the node and runs every bot's loop until ctx ends (those
// of Config.Bots, and those Serve adds meanwhile). On the way out every
// term is resigned after its connection is closed, and the registration
// is removed. It returns nil after a clean stop.
func (n *Node) Run(ctx context.Context) error {
	regCtx, stopReg := context.WithCancel(context.WithoutCancel(ctx))
	regDone := make(chan struct{})
	go func() {
		defer close(regDone)
		n.register(regCtx)
	}()
	// The pulse outlives ctx as registration does: a graceful stop keeps
	// its terms (and their pulse) until each has resigned.
	pulseCtx, stopPulse := context.WithCancel(context.WithoutCancel(ctx))
	pulsed := make(chan struct{})
	go func() {
		defer close(pulsed)
		if n.pulse != nil {
			n.pulse.Run(pulseCtx)
		}
	}()
	balanced := make(chan struct{})
	go func() {
		defer close(balanced)
		n.balance(ctx)
	}()
	n.mu.Lock()
	n.runCtx = ctx
	for _, l := range n.loops {
		n.startLocked(l)
	}
	n.mu.Unlock()
	<-ctx.Done()
	<-balanced
	n.mu.Lock()
	n.runCtx = nil // Serve from now on starts nothing
	n.mu.Unlock()
	n.loopWG.Wait()
	n.records.Wait()
	stopPulse()
	<-pulsed
	stopReg()
	<-regDone
	n.log.Info().Msg("node stopped")
	return nil
}
