package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/retry"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

var (
	// ErrNotLeader: this node does not (or no longer) hold the election.
	// Every reason a Term ends wraps it.
	ErrNotLeader = errors.New("election: not leader")
	// ErrNoLeader: no node holds the bot's election.
	ErrNoLeader = errors.New("election: no leader")
	// ErrLegacyLeader: a node of the old election layout (one key per bot,
	// Config.LegacyPrefix; botctl before the concurrency.Election layout)
	// holds the bot, so this node must not connect, whatever its own
	// election says. Errors that wrap it wrap ErrNotLeader too.
	ErrLegacyLeader = errors.New("election: a node of the old election layout holds the bot")
)

// campaignRetryMax is the longest wait between two failed candidacies, in
// RetryPeriods.
const campaignRetryMax = 8

// Elector campaigns for one bot's election on behalf of one node.
type Elector struct {
	cli       *clientv3.Client
	cfg       Config
	name      string // the concurrency.Election prefix: Prefix+BotID
	legacyKey string // the old layout's key: LegacyPrefix+BotID
	pulseKey  string // the leader's liveness pulse: PulsePrefix+BotID
	log       zerolog.Logger

	depositions atomic.Int64
	recOnce     sync.Once
	rec         *records                      // the node records this standby reads, without a Batch
	hold        atomic.Pointer[chan struct{}] // tests: pause pulses and renewals (a hung process)
}

// New returns an Elector for cfg, or cfg's first problem (see
// Config.Validate).
func New(cli *clientv3.Client, cfg Config) (*Elector, error) {
	if cli == nil {
		return nil, errors.New("election: nil etcd client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Elector{
		cli:       cli,
		cfg:       cfg,
		name:      cfg.Prefix + cfg.BotID,
		legacyKey: cfg.LegacyPrefix + cfg.BotID,
		pulseKey:  cfg.PulsePrefix + cfg.BotID,
		log:       cfg.Logger.With().Str("bot", cfg.BotID).Str("node", cfg.NodeID).Logger(),
	}, nil
}

// Name is the bot's election name, as concurrency.NewElection and
// `etcdctl elect` take it: Prefix+BotID. Candidates' keys are Name()+"/"+
// their lease in hex; the leader is the one created first.
func (e *Elector) Name() string { return e.name }

// LegacyKey is the bot's key in the old layout (one key per bot), which
// forbids this node to lead while it exists.
func (e *Elector) LegacyKey() string { return e.legacyKey }

// value is what an election key holds.
type value struct {
	Node  string     `json:"node"`
	Since *time.Time `json:"since,omitempty"` // nil while a candidate waits
	// PulseMS is the PulseTimeout, in milliseconds, after which this
	// candidate, once leading, may be deposed if its pulse stops; 0 (an
	// older botctl, or NoPulse): it publishes no pulse and is never deposed.
	PulseMS int64 `json:"pulse_ms,omitempty"`
	// NodePulseMS is the same for a candidate whose pulse is its node's
	// record (a Batch): NodePulsePrefix+Node. Such a candidate advertises
	// no PulseMS, so that a standby of botctl 0.5.0, which knows only the
	// per-bot pulse key, never deposes it for a pulse it does not write.
	NodePulseMS int64 `json:"node_pulse_ms,omitempty"`
}

// Campaign blocks until this node leads the bot's election, and returns the
// new Term, or until ctx ends (the error is then ctx's). Each call opens a
// new session (a new lease, TTL Config.TTL) and joins the election's queue
// with it: candidates are served in the order they joined. A term never
// outlives its session.
//
// By default the Term lives within ctx: when ctx ends, so does the term.
// Pass the node's lifetime context, not a campaign timeout. A leader that
// must finish work after it is told to stop campaigns with
// WithTermContext instead (see there).
//
// Before joining, Campaign revokes the lease recorded in Config.LeaseFile,
// if any (this node's candidacy from before a crash or an End), and then
// records the new one there.
//
// Errors from etcd are logged and the candidacy tried again after
// RetryPeriod, then after longer waits (doubling, with jitter, up to 8
// RetryPeriods) while it keeps failing; Campaign fails only when ctx ends
// or the etcd client is closed.
func (e *Elector) Campaign(ctx context.Context, opts ...CampaignOption) (*Term, error) {
	o := campaignOptions{termParent: ctx}
	for _, opt := range opts {
		opt(&o)
	}
	// Failed candidacies are tried again after RetryPeriod, then longer
	// (doubling, with jitter, up to campaignRetryMax RetryPeriods): when
	// etcd is overloaded, a node's thousand candidacies must not all come
	// back every RetryPeriod and keep it so.
	wait := retry.New(e.cfg.RetryPeriod, campaignRetryMax*e.cfg.RetryPeriod)
	for {
		if err := e.stopped(ctx); err != nil {
			return nil, err
		}
		t, err := e.campaignOnce(ctx, o.termParent)
		if t != nil {
			return t, nil
		}
		if stop := e.stopped(ctx); stop != nil {
			return nil, stop
		}
		d := wait.Next()
		e.log.Warn().Err(err).Dur("retry_in", d).Msg("campaign failed, retrying")
		if !pause.For(ctx, d) {
			return nil, ctx.Err()
		}
	}
}

// A CampaignOption changes one Campaign call.
type CampaignOption func(*campaignOptions)

type campaignOptions struct {
	termParent context.Context
}

// WithTermContext makes the won Term live within parent instead of within
// the context given to Campaign, which then bounds only the wait to win.
//
// It is for a graceful stop: a leader that, once told to stop, must still
// finish what its connection delivered, close the connection and only then
// release the bot, with its lease renewed all along. Campaign with the stop
// context and WithTermContext(context.WithoutCancel(stop)); when stop ends,
// the term keeps renewing (and its watchdog keeps running: a lost lease
// still cancels it at once) until the caller calls Resign or End, which it
// then must, or the term's goroutines run for as long as parent does.
func WithTermContext(parent context.Context) CampaignOption {
	return func(o *campaignOptions) { o.termParent = parent }
}

func (e *Elector) stopped(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if e.cli.Ctx().Err() != nil {
		return fmt.Errorf("campaign for bot %s: etcd client closed", e.cfg.BotID)
	}
	return nil
}

// campaignOnce is one candidacy: a session, a place in the queue, the wait
// for the candidates before it to go, then the confirmation that the lease
// and the key are still ours. It returns the new Term, living within
// termParent, or why not; whatever it does not hand over it releases.
func (e *Elector) campaignOnce(ctx, termParent context.Context) (*Term, error) {
	if err := e.revokePrevious(ctx); err != nil {
		return nil, err
	}
	gctx, cancel := context.WithTimeout(ctx, e.cfg.TTL)
	grant, err := e.cli.Grant(gctx, int64(e.cfg.TTL/time.Second))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	lease := grant.ID
	e.recordLease(lease)

	// cctx bounds the wait in the queue: the caller's ctx, or the session
	// ending (the lease lost while waiting: our key is gone, and
	// concurrency.Election would not notice). concurrency.Election
	// withdraws a cancelled candidacy with its client's Ctx(), which on the
	// shared client could block until etcd answers; on this view of it the
	// withdrawal fails at once instead, and release revokes the lease
	// (which deletes the key) with a bounded wait.
	cctx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	view := clientv3.NewCtxClient(cctx, clientv3.WithZapLogger(e.cli.GetLogger()))
	view.KV, view.Lease, view.Watcher = e.cli.KV, e.cli.Lease, e.cli.Watcher
	// The session lives until the term ends (or this candidacy fails), not
	// as long as ctx: WithTermContext may make the term outlive ctx.
	sess, err := concurrency.NewSession(view, concurrency.WithLease(lease),
		concurrency.WithTTL(int(e.cfg.TTL/time.Second)), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		e.revoke(lease)
		return nil, fmt.Errorf("open session: %w", err)
	}
	defer context.AfterFunc(sess.Ctx(), stopWaiting)()
	el := concurrency.NewElection(sess, e.name)
	candidate, _ := schema.Marshal(e.value(nil))
	// While we wait in the queue, the leader's pulse is watched: a leader
	// whose pulse stops is deposed (see pulse.go).
	wctx, stopWatching := context.WithCancel(cctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		e.watchPulse(wctx, lease)
	}()
	err = el.Campaign(cctx, string(candidate))
	stopWatching()
	<-watched
	if err != nil {
		e.release(sess)
		return nil, fmt.Errorf("campaign on %s: %w", e.name, err)
	}
	if err := e.stopped(ctx); err != nil {
		e.release(sess) // no term is handed to a caller that stopped waiting
		return nil, err
	}

	// Won. The renewal clock starts from a renewal of our own: the session
	// kept the lease alive while we waited, but its send times are unknown.
	rctx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
	defer cancel()
	start := time.Now()
	if _, err := e.cli.KeepAliveOnce(rctx, lease); err != nil {
		e.release(sess)
		return nil, fmt.Errorf("confirm lease %s after winning: %w", leaseHex(lease), err)
	}
	// The leader's value says since when it leads. Proclaim is
	// owner-checked: it fails if our key vanished while we waited.
	since := start.UTC().Truncate(time.Millisecond)
	val, _ := schema.Marshal(e.value(&since))
	if err := el.Proclaim(rctx, string(val)); err != nil {
		e.release(sess)
		return nil, fmt.Errorf("proclaim leader of %s: %w", e.name, err)
	}
	// The first pulse before the Term is handed over: a term that was
	// handed to the caller has pulsed at least once.
	var b *beat
	switch {
	case e.cfg.NoPulse:
	case e.cfg.Batch != nil:
		b = e.cfg.Batch.add(e.cfg.BotID, el.Rev())
		if err := e.cfg.Batch.first(rctx); err != nil {
			e.cfg.Batch.remove(e.cfg.BotID, b)
			e.release(sess)
			return nil, fmt.Errorf("first pulse of %s: %w", e.name, err)
		}
	default:
		if err := e.putPulse(rctx, el.Key(), el.Rev(), lease); err != nil {
			e.release(sess)
			return nil, fmt.Errorf("first pulse of %s: %w", e.name, err)
		}
	}
	if err := e.stopped(ctx); err != nil {
		if b != nil {
			e.cfg.Batch.remove(e.cfg.BotID, b)
		}
		e.release(sess)
		return nil, err
	}
	return newTerm(termParent, e, sess, el, start, b), nil
}

// release ends a candidacy that produced no term: the session's keep-alive
// stops and its lease is revoked, which deletes its key.
func (e *Elector) release(sess *concurrency.Session) {
	sess.Orphan()
	e.revoke(sess.Lease())
}

// revoke ends a lease, bounded by TTL: past that the lease has expired
// anyway.
func (e *Elector) revoke(lease clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.TTL)
	defer cancel()
	_, err := e.cli.Revoke(ctx, lease)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		e.log.Warn().Err(err).Str("lease", leaseHex(lease)).Msg("revoke lease failed; it expires within TTL")
		return fmt.Errorf("revoke lease %s: %w", leaseHex(lease), err)
	}
	e.forgetLease(lease)
	return nil
}

// LeaderInfo describes the node holding a bot's election.
type LeaderInfo struct {
	Node  string
	Since time.Time // when its term began, by its clock; zero if unknown
	Key   string    // its election key
	Rev   int64     // the term's revision (the key's CreateRevision)
	Lease clientv3.LeaseID
	// PulseTimeout is how long the leader's pulse may stand still before
	// standbys depose it, as it advertises; 0: it publishes no pulse and is
	// never deposed.
	PulseTimeout time.Duration
	// NodePulse: the leader's pulse is its counter in its node's record
	// (a Batch), not the bot's pulse key.
	NodePulse bool
}

// Leader reads who leads botID's election under prefix ("" means
// DefaultPrefix): the candidate key created first, exactly as
// concurrency.Election.Leader and `etcdctl elect --listen` read it. It
// returns ErrNoLeader if nobody does.
func Leader(ctx context.Context, cli *clientv3.Client, prefix, botID string) (LeaderInfo, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	resp, err := cli.Get(ctx, prefix+botID+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return LeaderInfo{}, fmt.Errorf("read leader of bot %s: %w", botID, err)
	}
	if len(resp.Kvs) == 0 {
		return LeaderInfo{}, ErrNoLeader
	}
	return leaderInfo(resp.Kvs[0]), nil
}

// LegacyLeader reads who holds botID's key of the old layout (one key per
// bot) under legacyPrefix ("" means DefaultLegacyPrefix): a node of an
// older botctl, which new nodes yield to (see the package comment). It
// returns ErrNoLeader if the key does not exist.
func LegacyLeader(ctx context.Context, cli *clientv3.Client, legacyPrefix, botID string) (LeaderInfo, error) {
	if legacyPrefix == "" {
		legacyPrefix = DefaultLegacyPrefix
	}
	resp, err := cli.Get(ctx, legacyPrefix+botID)
	if err != nil {
		return LeaderInfo{}, fmt.Errorf("read old-layout leader of bot %s: %w", botID, err)
	}
	if len(resp.Kvs) == 0 {
		return LeaderInfo{}, ErrNoLeader
	}
	return leaderInfo(resp.Kvs[0]), nil
}

// Observe reports botID's leader under prefix ("" means DefaultPrefix)
// each time it changes or proclaims a new value, through
// concurrency.Election.Observe: first the current leader (once there is
// one), then every change. It holds a session (a lease of MinTTL, kept
// alive) while it runs. The channel closes when ctx ends or the watch
// breaks; observe again then.
func Observe(ctx context.Context, cli *clientv3.Client, prefix, botID string) (<-chan LeaderInfo, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(MinTTL/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("observe leader of bot %s: open session: %w", botID, err)
	}
	out := make(chan LeaderInfo)
	go func() {
		defer close(out)
		defer func() {
			sess.Orphan()
			rctx, cancel := context.WithTimeout(context.Background(), MinTTL)
			defer cancel()
			cli.Revoke(rctx, sess.Lease()) // best effort: it expires in MinTTL
		}()
		for resp := range concurrency.NewElection(sess, prefix+botID).Observe(ctx) {
			if len(resp.Kvs) == 0 {
				continue
			}
			select {
			case out <- leaderInfo(resp.Kvs[0]):
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func leaderInfo(kv *mvccpb.KeyValue) LeaderInfo {
	info := LeaderInfo{Key: string(kv.Key), Rev: kv.CreateRevision, Lease: clientv3.LeaseID(kv.Lease)}
	var v value
	if err := json.Unmarshal(kv.Value, &v); err == nil && v.Node != "" {
		info.Node = v.Node
		if v.Since != nil {
			info.Since = *v.Since
		}
		info.PulseTimeout = time.Duration(v.PulseMS) * time.Millisecond
		if v.NodePulseMS > 0 {
			info.PulseTimeout, info.NodePulse = time.Duration(v.NodePulseMS)*time.Millisecond, true
		}
	} else {
		info.Node = string(kv.Value)
	}
	return info
}

func leaseHex(id clientv3.LeaseID) string { return fmt.Sprintf("%x", int64(id)) }

// Candidates lists the nodes in the bot's election queue, in the order
// they lead: the leader first, then each waiting candidate as it joined
// (the candidate keys' CreateRevision). One read; a candidate whose value
// names no node is listed by its value.
func (e *Elector) Candidates(ctx context.Context) ([]string, error) {
	resp, err := e.cli.Get(ctx, e.name+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("read the candidates of %s: %w", e.name, err)
	}
	out := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, leaderInfo(kv).Node)
	}
	return out, nil
}

// Key is the bot's election prefix, under which each candidate's key lies.
func (e *Elector) Key() string { return e.name }

// Queues reads, in one request, the election queue of every bot under
// prefix ("" means DefaultPrefix): per bot, the node of each candidate
// key in the order they lead (the leader first, then each waiting
// candidate as it joined), as Candidates lists one bot's. A bot whose
// queue is empty is absent. The revision is the read's.
func Queues(ctx context.Context, cli *clientv3.Client, prefix string) (map[string][]string, int64, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, 0, fmt.Errorf("read the election queues under %s: %w", prefix, err)
	}
	out := map[string][]string{}
	for _, kv := range resp.Kvs {
		bot, _, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), prefix), "/")
		if !ok || bot == "" {
			continue // not a candidate key
		}
		out[bot] = append(out[bot], leaderInfo(kv).Node)
	}
	return out, resp.Header.Revision, nil
}
