package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var (
	// ErrNotLeader: this node does not (or no longer) hold the election.
	// Every reason a Term ends wraps it.
	ErrNotLeader = errors.New("election: not leader")
	// ErrNoLeader: no node holds the bot's election.
	ErrNoLeader = errors.New("election: no leader")
)

// Elector campaigns for one bot's election on behalf of one node.
type Elector struct {
	cli *clientv3.Client
	cfg Config
	key string
	log zerolog.Logger
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
		cli: cli,
		cfg: cfg,
		key: cfg.Prefix + cfg.BotID,
		log: cfg.Logger.With().Str("bot", cfg.BotID).Str("node", cfg.NodeID).Logger(),
	}, nil
}

// Key is the bot's election key.
func (e *Elector) Key() string { return e.key }

// value is what the election key holds.
type value struct {
	Node  string    `json:"node"`
	Since time.Time `json:"since"`
}

// Campaign blocks until this node leads the bot's election, and returns the
// new Term, or until ctx ends (the error is then ctx's). Each call grants a
// new lease: a term never outlives its lease.
//
// By default the Term lives within ctx: when ctx ends, so does the term.
// Pass the node's lifetime context, not a campaign timeout. A leader that
// must finish work after it is told to stop campaigns with
// WithTermContext instead (see there).
//
// Errors from etcd are logged and retried every RetryPeriod; Campaign fails
// only when ctx ends or the etcd client is closed.
func (e *Elector) Campaign(ctx context.Context, opts ...CampaignOption) (*Term, error) {
	o := campaignOptions{termParent: ctx}
	for _, opt := range opts {
		opt(&o)
	}
	for {
		if err := e.stopped(ctx); err != nil {
			return nil, err
		}
		t, rev, err := e.tryAcquire(ctx, o.termParent)
		if t != nil {
			return t, nil
		}
		if err == nil {
			// Another node leads: wait for its key to go.
			err = e.waitDelete(ctx, rev)
		}
		if err != nil {
			if stop := e.stopped(ctx); stop != nil {
				return nil, stop
			}
			e.log.Warn().Err(err).Msg("campaign: etcd request failed, retrying")
			if err := sleep(ctx, e.cfg.RetryPeriod); err != nil {
				return nil, err
			}
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

// tryAcquire creates the election key if it does not exist. It returns the
// new Term, living within termParent, or (nil, rev) with the revision at
// which another node held the key. If ctx ends meanwhile it releases what
// it won: no term is handed to a caller that stopped waiting.
func (e *Elector) tryAcquire(ctx, termParent context.Context) (*Term, int64, error) {
	rctx, cancel := context.WithTimeout(ctx, e.cfg.TTL)
	defer cancel()
	// Look first, so standbys do not grant a lease every round.
	get, err := e.cli.Get(rctx, e.key)
	if err != nil {
		return nil, 0, fmt.Errorf("read election key %s: %w", e.key, err)
	}
	if len(get.Kvs) > 0 {
		return nil, get.Header.Revision, nil
	}

	// The renewal clock starts before the grant is sent: the server's
	// expiry is at least TTL after this instant.
	start := time.Now()
	grant, err := e.cli.Grant(rctx, int64(e.cfg.TTL/time.Second))
	if err != nil {
		return nil, 0, fmt.Errorf("grant lease: %w", err)
	}
	lease := grant.ID
	val, _ := json.Marshal(value{Node: e.cfg.NodeID, Since: start.UTC().Truncate(time.Millisecond)})
	resp, err := e.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(e.key), "=", 0)).
		Then(clientv3.OpPut(e.key, string(val), clientv3.WithLease(lease))).
		Commit()
	if err != nil {
		// The put may have committed: revoking the lease removes the key
		// if it did.
		e.revoke(lease)
		return nil, 0, fmt.Errorf("create election key %s: %w", e.key, err)
	}
	if !resp.Succeeded {
		e.revoke(lease)
		return nil, resp.Header.Revision, nil
	}
	if err := e.stopped(ctx); err != nil {
		e.revoke(lease)
		return nil, 0, err
	}
	return newTerm(termParent, e, lease, resp.Header.Revision, start), 0, nil
}

// waitDelete returns when the key is deleted after rev, or after TTL so that
// the caller re-reads the key even if a watch silently stalls.
func (e *Elector) waitDelete(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), e.cfg.TTL)
	defer cancel()
	for wr := range e.cli.Watch(wctx, e.key, clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watch election key %s: %w", e.key, err)
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return nil
			}
		}
	}
	return nil // timeout, ctx end or client close: the caller decides
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
	return nil
}

// LeaderInfo describes the node holding a bot's election.
type LeaderInfo struct {
	Node  string
	Since time.Time // when its term began, by its clock; zero if unknown
	Rev   int64     // the term's revision (the key's CreateRevision)
	Lease clientv3.LeaseID
}

// Leader reads who leads botID's election under prefix ("" means
// DefaultPrefix). It returns ErrNoLeader if nobody does.
func Leader(ctx context.Context, cli *clientv3.Client, prefix, botID string) (LeaderInfo, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	resp, err := cli.Get(ctx, prefix+botID)
	if err != nil {
		return LeaderInfo{}, fmt.Errorf("read leader of bot %s: %w", botID, err)
	}
	if len(resp.Kvs) == 0 {
		return LeaderInfo{}, ErrNoLeader
	}
	return leaderInfo(resp.Kvs[0]), nil
}

func leaderInfo(kv *mvccpb.KeyValue) LeaderInfo {
	info := LeaderInfo{Rev: kv.CreateRevision, Lease: clientv3.LeaseID(kv.Lease)}
	var v value
	if err := json.Unmarshal(kv.Value, &v); err == nil && v.Node != "" {
		info.Node, info.Since = v.Node, v.Since
	} else {
		info.Node = string(kv.Value)
	}
	return info
}

func leaseHex(id clientv3.LeaseID) string { return fmt.Sprintf("%x", int64(id)) }

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
