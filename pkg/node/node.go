// Package node is a botctl node's life: it registers itself, and for every
// bot it campaigns in the bot's election, holds the bot's WeCom connection
// while it leads, and goes back to campaigning when the connection or the
// leadership ends.
//
// Per bot, one loop: check the env gate → campaign → verify leadership with
// a linearizable read → dial a fresh connection with fresh handlers → wait
// for the connection's end (by its Done event), the term's end or a stop →
// close the connection, wait for it to be gone → drain (Config.Drain) →
// resign → back off if the term was not a stable connection → campaign
// again. A term's connection is always gone before the term is released, so
// the next leader never overlaps with it, and handlers never stack up: each
// connection has its own, the next connection is dialed only after the
// previous one's Done, and the previous term's callbacks have been drained.
//
// # How a term ends
//
// Lost leadership (the term's context ends with election.ErrNotLeader):
// no lock, no identity. The connection is closed at once, then the node
// waits for it to be gone and for Leading and Drain to return, resigns, and
// campaigns again.
//
// Graceful stop (the node's context ends, or the bot's env gate moves to
// another env): the term stays ours and its lease stays renewed (the term
// is campaigned with election.WithTermContext) until the very end, in this
// order: Leading's context ends and it returns (the pusher finishes its
// writes in flight on the still-open connection); the connection is closed
// and its Done observed; Drain returns (every callback the connection
// delivered has been handled to the end); then the term is resigned, which
// stops renewals and releases the bot at once, so a standby takes over
// within one campaign round. If the term is lost at any point of this, the
// connection is closed at once as above.
//
// # Crash, restart and upgrade
//
// With Config.DataDir, each bot's election lease is kept in the data dir
// and revoked by the next run before it campaigns (see the election
// package): a node killed and restarted by systemd hands its bots to the
// standbys at once, not after the TTL. A node that is not restarted (or
// hangs, or whose machine is gone) is deposed by a standby once its
// liveness pulse stands still for the election's PulseTimeout (3s by
// default; the election package says why that is safe). While a node of the old election
// layout (an older botctl, during a rolling upgrade) holds a bot, Verify
// refuses and the node backs off with that reason in its state, never
// connecting over it.
//
// # Backoff
//
// Every way through the loop that is not a stable connection waits before
// campaigning again, exponentially with jitter (Config.Backoff): a failed
// verify, a refused or failing dial, a non-auth subscribe error, a
// connection that ended (or was kicked) before StableTerm, an unreadable env
// gate or a failed campaign. The node resigns before it waits, so another
// node may try meanwhile; each node backs off on its own, so a bot whose
// WeCom endpoint is down costs a few etcd writes per node per BackoffMax,
// not a hot loop. Kicked: something outside the cluster holds the bot's
// credentials, and reconnecting blindly would ping-pong with it, so a kick
// always waits. Auth failure (wecom.ErrAuthFailed, only for an
// authentication errcode at subscribe): the bot is marked needs_human and
// retried only after the long AuthBackoff; retrying a bad secret never
// helps.
//
// # Kicks and the env gate
//
// A kick while this node's term is still its own (Verify says so) came
// from outside the cluster: a second environment, or a leftover process,
// connecting with the same credentials. Each is logged as such and
// recorded (transition "foreign_kick"); KickLimit of them within
// KickWindow mark the bot needs_human with a reason that says what to do,
// and the node then retries only after AuthBackoff (doubling), one kick per
// retry, instead of ping-ponging with the other holder every BackoffMax. A
// kick after this node lost its term (deposed by a standby, see the
// election package) is the cluster's own handover and does not count. A
// node whose env does not hold a bot's env gate does not campaign for it:
// its state is gated, with the gate's env and the command that moves it in
// the reason, and it logs the same once per gate change.
package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Inbound receives what a leader's connection delivers. Its methods run on
// the connection's dispatch goroutine, one at a time: hand long work off,
// and let Config.Drain wait for it. term is the leadership the connection
// belongs to; its context ends when leadership is lost, or when the term
// is resigned after a graceful stop, which is only after the connection
// has closed and Drain has returned: work bound to it may finish.
type Inbound interface {
	HandleMessage(term *election.Term, c *wecom.Conn, reqID string, m *wecom.MsgCallback)
	HandleEvent(term *election.Term, c *wecom.Conn, reqID string, ev *wecom.EventCallback)
}

// Config configures a node. Zero values take the defaults named.
type Config struct {
	NodeID  string
	Env     string // default "default"
	Version string
	Address string // the node's HTTP API, as other nodes reach it
	Slots   int
	Roles   []string // default access, compute
	// Prefix of the node's etcd keys. Default "/botctl/".
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
	// unsuccessful term writes to etcd (lease, key, transitions, registry,
	// about ten revisions), so a node makes at most one such term per
	// BackoffMax/2 once the step has grown. BackoffMax must be at least
	// Backoff.
	Backoff, BackoffMax, StableTerm time.Duration
	// Drain, if set, is called after a connected term's connection is
	// closed and gone (its Done observed) and before the term is
	// resigned, on every way out of that term. It must return once every
	// callback that connection delivered to Inbound has been handled to the
	// end (published, recorded, receipt attempted), or when ctx ends
	// (DrainTimeout). The term's lease is renewed meanwhile unless the term
	// was lost, so handlers may go on using term.Context(). Wire the
	// inbound handler's wait here (e.g. pkg/access's Wait). Nil: resign as
	// soon as the connection is gone.
	Drain func(ctx context.Context, term *election.Term)
	// DrainTimeout bounds Drain. Default 15s (DefaultDrainTimeout). Raise it if handlers may
	// take longer (a slow JetStream); the bot has no connection while
	// Drain runs, so it also bounds how long a graceful stop delays the
	// takeover. Whatever is still unhandled at the deadline is recovered by
	// the next leader's gap backfill.
	DrainTimeout time.Duration
	// SpreadDelay is how long a node waits before campaigning for each bot
	// it already leads, so that several bots spread over nodes instead of
	// all going to the first node up. Default 1s; set it below the TTL.
	SpreadDelay time.Duration
	// Inbound handles callbacks; nil drops them (logging each).
	Inbound Inbound
	// Leading, if set, runs while this node holds a bot's connection (the
	// pusher): it starts once the connection is up and must return when ctx
	// ends, which happens as soon as the connection or the term ends, or
	// the node stops. On a graceful stop ctx ends first, while the
	// connection is still open, and the connection is closed once Leading
	// has returned (lost leadership closes it at once instead). The term is
	// resigned only after it has returned.
	Leading func(ctx context.Context, term *election.Term, conn *wecom.Conn)
	// Health, if set, hears every connection attempt and end (pkg/health's
	// monitor: the health record, incidents and recovery).
	Health Observer
	// EtcdError, if set, hears each etcd request of the node's own loops
	// that failed, by operation: gate (claim or watch the env gate),
	// campaign, registry (the node record and its lease) and transition
	// (the bot's history), e.g. to count them (pkg/metrics). Called on
	// those loops: it must not block.
	EtcdError func(op string)
	Logger    zerolog.Logger
}

// Observer hears a bot's connection life on this node. Its methods are
// called on the bot's loop: they must not block, except AuthHold.
type Observer interface {
	// Dialing: this node leads the bot (Verify passed) and dials now.
	Dialing(term *election.Term)
	// Dialed is the dial's outcome: a subscribed conn, or err
	// (errors.Is(err, wecom.ErrAuthFailed) for rejected credentials).
	Dialed(term *election.Term, conn *wecom.Conn, err error)
	// Ended: conn is gone. graceful: the node stopped or handed the bot
	// over on purpose (a deploy, the env gate), not a failure; a graceful
	// Ended may block briefly (bounded) to record the handover before the
	// term is resigned.
	Ended(term *election.Term, conn *wecom.Conn, graceful bool)
	// AuthHold is called after WeCom rejected the bot's credentials, with
	// the term resigned. It may block until a person has acted (the
	// incident acknowledged) or ctx ends, and reports whether it did so;
	// false: it has no opinion, and the loop waits its AuthBackoff.
	AuthHold(ctx context.Context, bot string) bool
	// Conflict: another holder of the bot's credentials, outside this
	// cluster, keeps kicking its connection (kick_limit reached): only a
	// person can stop it.
	Conflict(bot, reason string)
}

func (c *Config) setDefaults() {
	if c.Env == "" {
		c.Env = "default"
	}
	if c.Prefix == "" {
		c.Prefix = "/botctl/"
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
	// records are transition writes in flight (they never hold up the
	// loop: a failover must not wait for an operator's record).
	records sync.WaitGroup
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
	n := &Node{
		cfg: cfg, cli: cli, started: time.Now().UTC(),
		log:    cfg.Logger.With().Str("node", cfg.NodeID).Logger(),
		status: map[string]BotStatus{},
		dirty:  make(chan struct{}, 1),
	}
	for _, b := range cfg.Bots {
		if _, err := election.New(cli, n.electionConfig(b.ID)); err != nil {
			return nil, fmt.Errorf("node: bot %s: %w", b.ID, err)
		}
		n.status[b.ID] = BotStatus{State: StateStarting, Since: time.Now().UTC()}
	}
	return n, nil
}

// etcdError reports a failed etcd request of op to Config.EtcdError.
func (n *Node) etcdError(op string) {
	if n.cfg.EtcdError != nil {
		n.cfg.EtcdError(op)
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

func (n *Node) setState(bot string, st BotState, reason string, term int64) {
	n.mu.Lock()
	n.status[bot] = BotStatus{State: st, Since: time.Now().UTC(), Reason: reason, Term: term}
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
		Host: host, PID: os.Getpid(),
	}
}

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
	// TransitionTimeout bounds the etcd write of one transition record
	// (Run waits for the last ones, "resigned" among them).
	TransitionTimeout = 2 * time.Second
	// RevokeTimeout bounds the revoke of the registry's lease.
	RevokeTimeout = 2 * time.Second
)

// Run registers the node and runs every bot's loop until ctx ends. On the
// way out every term is resigned after its connection is closed, and the
// registration is removed. It returns nil after a clean stop.
func (n *Node) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	regCtx, stopReg := context.WithCancel(context.WithoutCancel(ctx))
	regDone := make(chan struct{})
	go func() {
		defer close(regDone)
		n.register(regCtx)
	}()
	for i, b := range n.cfg.Bots {
		wg.Go(func() { n.botLoop(ctx, i, b) })
	}
	<-ctx.Done()
	wg.Wait()
	n.records.Wait()
	stopReg()
	<-regDone
	n.log.Info().Msg("node stopped")
	return nil
}

// register keeps the node's record under a lease, rewriting it when a bot's
// state changes, until ctx ends; then it revokes the lease (removing the
// record at once).
func (n *Node) register(ctx context.Context) {
	key := n.cfg.Prefix + nodesDir + n.cfg.NodeID
	ttl := int64(n.cfg.RegistryTTL / time.Second)
	if ttl < 2 {
		ttl = 2
	}
	for ctx.Err() == nil {
		lease, err := n.cli.Grant(ctx, ttl)
		if err != nil {
			if ctx.Err() == nil {
				n.etcdError("registry")
			}
			n.log.Warn().Err(err).Msg("node registry: grant lease failed; retrying")
			pause.For(ctx, time.Second)
			continue
		}
		n.keepRegistered(ctx, key, lease.ID)
		rctx, cancel := context.WithTimeout(context.Background(), RevokeTimeout)
		n.cli.Revoke(rctx, lease.ID)
		cancel()
	}
}

func (n *Node) keepRegistered(ctx context.Context, key string, lease clientv3.LeaseID) {
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ka, err := n.cli.KeepAlive(kctx, lease)
	if err != nil {
		n.etcdError("registry")
		n.log.Warn().Err(err).Msg("node registry: keep-alive failed")
		return
	}
	put := func() error {
		raw, _ := json.Marshal(n.Info())
		_, err := n.cli.Put(kctx, key, string(raw), clientv3.WithLease(lease))
		return err
	}
	if err := put(); err != nil {
		if ctx.Err() == nil {
			n.etcdError("registry")
		}
		n.log.Warn().Err(err).Msg("node registry: register failed")
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ka:
			if !ok {
				if ctx.Err() == nil {
					n.etcdError("registry") // keep-alives unanswered for the lease's TTL
				}
				n.log.Warn().Msg("node registry: lease lost; registering again")
				return
			}
		case <-n.dirty:
			if err := put(); err != nil {
				if ctx.Err() == nil {
					n.etcdError("registry")
					n.log.Warn().Err(err).Msg("node registry: update failed")
				}
				return
			}
		}
	}
}
