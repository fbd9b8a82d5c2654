package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Term is one node's leadership of one bot's election, from winning until
// its context is cancelled. The exported fields describe it and must not be
// changed.
type Term struct {
	Bot, Node string
	Key       string           // the term's election key, Prefix+BotID+"/"+lease in hex
	Lease     clientv3.LeaseID // the session lease the key is bound to; new per term
	Rev       int64            // the term's revision: the key's CreateRevision
	Start     time.Time        // send time of the renewal that confirmed the lease on winning, by this node's clock

	e      *Elector
	beat   *beat // the term's entry in its node's pulse record (Config.Batch), or nil
	sess   *concurrency.Session
	log    zerolog.Logger
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	// watchFrom is the revision the term was confirmed at (its Proclaim):
	// the key watches start after it. Not Rev: a candidate may have waited
	// long, and what happened meanwhile (an old-layout key that came and
	// went) is not this term's concern; Verify reads the present.
	watchFrom int64

	resignMu sync.Mutex
	el       *concurrency.Election // used by Resign only, under resignMu

	mu        sync.Mutex
	lastRenew time.Time   // send time of the last successful renewal probe
	watchdog  clock.Timer // fires RenewDeadline after lastRenew
}

func newTerm(parent context.Context, e *Elector, sess *concurrency.Session, el *concurrency.Election, start time.Time, b *beat) *Term {
	ctx, cancel := context.WithCancelCause(parent)
	lease := sess.Lease()
	t := &Term{
		Bot: e.cfg.BotID, Node: e.cfg.NodeID, Key: el.Key(), Lease: lease, Rev: el.Rev(), Start: start,
		e:         e,
		beat:      b,
		sess:      sess,
		el:        el,
		ctx:       ctx,
		cancel:    cancel,
		log:       e.log.With().Int64("term", el.Rev()).Str("lease", leaseHex(lease)).Logger(),
		lastRenew: start,
		watchFrom: el.Header().Revision,
	}
	t.mu.Lock()
	t.watchdog = e.cfg.Clock.AfterFunc(time.Until(start.Add(e.cfg.RenewDeadline)), t.renewDeadlinePassed)
	t.mu.Unlock()
	t.log.Info().Str("key", t.Key).Msg("became leader")
	t.wg.Add(4)
	switch {
	case b != nil:
		t.wg.Add(1)
		go t.beats()
	case !e.cfg.NoPulse:
		t.wg.Add(1)
		go t.pulse()
	}
	go t.renew()
	go t.watch(t.Key, t.notOurs)
	go t.watch(e.legacyKey, t.legacyHeld)
	go func() {
		defer t.wg.Done()
		select {
		case <-ctx.Done(): // for any reason, including the parent context
		case <-sess.Done():
			t.lose(fmt.Errorf("%w: session of lease %s ended (its keep-alive stopped: lease gone or etcd unreachable)", ErrNotLeader, leaseHex(lease)))
		}
		t.ended()
	}()
	return t
}

// Context is cancelled the moment leadership is in doubt (see the package
// comment for when). Bind everything the leader does to it, and close the
// bot's connection when it is done.
func (t *Term) Context() context.Context { return t.ctx }

// Done is Context().Done().
func (t *Term) Done() <-chan struct{} { return t.ctx.Done() }

// Err is nil while the term lasts, then why it ended: an error wrapping
// ErrNotLeader (and ErrLegacyLeader if a node of the old layout took the
// bot), or the error of the term's parent context (the context given to
// Campaign, or to WithTermContext).
func (t *Term) Err() error {
	if t.ctx.Err() == nil {
		return nil
	}
	return context.Cause(t.ctx)
}

// Verify checks, with one linearizable read, that the election key is still
// this term's (same lease, same revision), that no key of the old layout
// (Config.LegacyPrefix) holds the bot, and that the term has not ended.
// Call it right before every connect, and connect only if it returns nil:
// ErrNotLeader (wrapped) means another node may lead, ErrLegacyLeader
// (wrapped too) that an old-version node does; any other error means
// leadership could not be confirmed. A verdict other than nil ends the
// term; a failed read does not.
func (t *Term) Verify(ctx context.Context) error {
	if err := t.notLeader(); err != nil {
		return err
	}
	resp, err := t.e.cli.Txn(ctx).Then(clientv3.OpGet(t.Key), clientv3.OpGet(t.e.legacyKey)).Commit()
	if err != nil {
		return fmt.Errorf("verify leadership of bot %s: %w", t.Bot, err)
	}
	for i, check := range []func([]*mvccpb.KeyValue) error{t.notOurs, t.legacyHeld} {
		if cause := check(resp.Responses[i].GetResponseRange().Kvs); cause != nil {
			t.lose(cause)
			return cause
		}
	}
	// The read took time: the renewal deadline may have passed meanwhile,
	// even if the watchdog has not run yet (a paused process).
	t.mu.Lock()
	last := t.lastRenew
	t.mu.Unlock()
	if time.Since(last) >= t.e.cfg.RenewDeadline {
		t.renewDeadlinePassed()
	}
	return t.notLeader()
}

// Check is Verify without the read: nil while the term lasts and its last
// renewal is within RenewDeadline. It costs nothing; call it right before
// each step that commits to acting as leader (writing the subscribe frame),
// after Verify.
func (t *Term) Check() error {
	t.mu.Lock()
	last := t.lastRenew
	t.mu.Unlock()
	if time.Since(last) >= t.e.cfg.RenewDeadline {
		t.renewDeadlinePassed()
	}
	return t.notLeader()
}

// Resign ends the term at once: it cancels the term's context (renewals
// stop), withdraws from the election (concurrency.Election's Resign, an
// owner-checked delete of the term's key) and revokes the session lease,
// so another node can win within one campaign round instead of a TTL.
// Close the bot's connection, and let what it delivered be handled, before
// calling Resign: until then the lease is renewed, and once Resign is
// called the next leader may connect. Resign waits for the term's
// goroutines, like End. It is idempotent; if both the delete and the revoke
// fail the key expires within TTL anyway, and the error says so.
func (t *Term) Resign(ctx context.Context) error {
	t.lose(fmt.Errorf("%w: resigned", ErrNotLeader))
	defer t.End()
	t.resignMu.Lock()
	resignErr := t.el.Resign(ctx) // a no-op once done
	t.resignMu.Unlock()
	_, err := t.e.cli.Revoke(ctx, t.Lease)
	if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.e.forgetLease(t.Lease)
		return nil
	}
	if resignErr == nil {
		// The key is gone; only the lease, now bound to nothing, lingers.
		t.log.Warn().Err(err).Msg("resigned, but revoking the session lease failed; it expires within TTL")
		return nil
	}
	return fmt.Errorf("resign bot %s: delete key %s and revoke lease %s failed (the key expires within %s): %w",
		t.Bot, t.Key, leaseHex(t.Lease), t.e.cfg.TTL, errors.Join(resignErr, err))
}

// End cancels the term's context without releasing the key (the lease then
// expires within TTL, or is revoked by this Elector's next Campaign, or by
// the next run of the node if the lease is recorded in Config.LeaseFile)
// and waits until the term's goroutines have returned. Idempotent.
func (t *Term) End() {
	t.lose(fmt.Errorf("%w: term ended", ErrNotLeader))
	t.wg.Wait()
}

// notLeader is the reason the term ended, wrapping ErrNotLeader, or nil.
func (t *Term) notLeader() error {
	if t.ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(t.ctx)
	if errors.Is(cause, ErrNotLeader) {
		return cause
	}
	return fmt.Errorf("%w: term ended: %w", ErrNotLeader, cause)
}

// lose ends the term with cause (the first cause wins).
func (t *Term) lose(cause error) { t.cancel(cause) }

// ended runs once, when the term's context is done. The session's own
// keep-alive stops here: a term that ended has no use for its lease, which
// Resign revokes (or which expires).
func (t *Term) ended() {
	t.mu.Lock()
	t.watchdog.Stop()
	t.mu.Unlock()
	t.sess.Orphan()
	if t.beat != nil {
		t.e.cfg.Batch.remove(t.Bot, t.beat)
	}
	t.log.Info().AnErr("reason", context.Cause(t.ctx)).Dur("held", time.Since(t.Start)).Msg("leadership ended")
}

func (t *Term) renewDeadlinePassed() {
	t.mu.Lock()
	last := t.lastRenew
	t.mu.Unlock()
	if time.Since(last) < t.e.cfg.RenewDeadline {
		return // a renewal landed as the watchdog fired; it was re-armed
	}
	t.lose(fmt.Errorf("%w: lease not renewed for %s (RenewDeadline %s)",
		ErrNotLeader, time.Since(last).Round(time.Millisecond), t.e.cfg.RenewDeadline))
}

// renewed records a successful renewal sent at sent and pushes the
// watchdog back.
func (t *Term) renewed(sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Err() != nil || !sent.After(t.lastRenew) {
		return
	}
	t.lastRenew = sent
	t.watchdog.Reset(time.Until(sent.Add(t.e.cfg.RenewDeadline)))
}

// renewal is one answered probe of the lease: when it was sent, and
// whether the server said the lease is gone.
type renewal struct {
	sent time.Time
	gone bool
}

// renew probes the lease every RenewInterval with one KeepAliveOnce
// (hedged: hedge.go), and
// records the send time of each probe the server accepted: the server's
// expiry is at least TTL after it, which is what the watchdog counts from.
// The session keeps the lease alive on its own stream too, but that stream
// reports no send times; it can only push the expiry later, never earlier,
// so it does not weaken the bound.
func (t *Term) renew() {
	defer t.wg.Done()
	cfg := t.e.cfg
	next := cfg.RenewInterval
	for {
		if !pause.For(t.ctx, next) || t.e.held(t.ctx) != nil {
			return
		}
		if t.e.cli.Ctx().Err() != nil {
			t.lose(fmt.Errorf("%w: etcd client closed", ErrNotLeader))
			return
		}
		t.mu.Lock()
		deadline := t.lastRenew.Add(cfg.RenewDeadline)
		t.mu.Unlock()
		ctx, cancel := context.WithDeadline(t.ctx, deadline)
		probe, err := hedge(ctx, cfg.Clock, cfg.HedgeAfter, func(ctx context.Context) (renewal, error) {
			sent := time.Now()
			resp, err := t.e.cli.KeepAliveOnce(ctx, t.Lease)
			switch {
			case err == nil:
				return renewal{sent: sent, gone: resp.TTL <= 0}, nil
			case errors.Is(err, rpctypes.ErrLeaseNotFound):
				return renewal{sent: sent, gone: true}, nil // an answer: ends the hedge
			}
			return renewal{}, err
		})
		cancel()
		switch {
		case err == nil && !probe.gone:
			t.renewed(probe.sent)
			next = cfg.RenewInterval
			continue
		case err == nil:
			t.lose(fmt.Errorf("%w: lease %s expired or was revoked on the server", ErrNotLeader, leaseHex(t.Lease)))
			return
		case t.ctx.Err() != nil:
			return
		}
		if !time.Now().Before(deadline) {
			t.renewDeadlinePassed()
			return
		}
		t.log.Warn().Err(err).Dur("deadline_in", time.Until(deadline).Round(time.Millisecond)).Msg("lease renewal failed, retrying")
		next = min(cfg.RetryPeriod, time.Until(deadline))
	}
}

// watch ends the term when verdict finds key's state (empty if deleted)
// not compatible with the term. If the watch breaks it re-reads the key and
// watches again.
func (t *Term) watch(key string, verdict func([]*mvccpb.KeyValue) error) {
	defer t.wg.Done()
	rev := t.watchFrom + 1
	for {
		ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(t.ctx))
		for wr := range t.e.cli.Watch(ctx, key, clientv3.WithRev(rev)) {
			if wr.Err() != nil {
				break // the channel closes next; re-read below
			}
			for _, ev := range wr.Events {
				var kvs []*mvccpb.KeyValue
				if ev.Type == mvccpb.PUT {
					kvs = append(kvs, ev.Kv)
				}
				if cause := verdict(kvs); cause != nil {
					cancel()
					t.lose(cause)
					return
				}
			}
			rev = wr.Header.Revision + 1
		}
		cancel()
		if !pause.For(t.ctx, t.e.cfg.RetryPeriod) {
			return
		}
		gctx, gcancel := context.WithTimeout(t.ctx, t.e.cfg.RenewDeadline)
		resp, err := t.e.cli.Get(gctx, key)
		gcancel()
		if err != nil {
			continue // renewal failing too ends the term in time
		}
		if cause := verdict(resp.Kvs); cause != nil {
			t.lose(cause)
			return
		}
		rev = resp.Header.Revision + 1
	}
}

// notOurs says why kvs (the term key's current state, empty if deleted) is
// not this term's key, or nil if it is.
func (t *Term) notOurs(kvs []*mvccpb.KeyValue) error {
	if len(kvs) == 0 {
		return fmt.Errorf("%w: election key %s was deleted (lease expired or revoked, or an operator)", ErrNotLeader, t.Key)
	}
	kv := kvs[0]
	if clientv3.LeaseID(kv.Lease) != t.Lease || kv.CreateRevision != t.Rev {
		l := leaderInfo(kv)
		return fmt.Errorf("%w: election key %s was overwritten (node %q, lease %s, revision %d)", ErrNotLeader, t.Key, l.Node, leaseHex(l.Lease), l.Rev)
	}
	return nil
}

// legacyHeld says why kvs (the old layout's key, empty if absent) forbids
// this term to act, or nil if it does not.
func (t *Term) legacyHeld(kvs []*mvccpb.KeyValue) error {
	if len(kvs) == 0 {
		return nil
	}
	l := leaderInfo(kvs[0])
	return fmt.Errorf("%w: %w: key %s of the old election layout is held by node %q (an older botctl); not leading until it is gone",
		ErrNotLeader, ErrLegacyLeader, t.e.legacyKey, l.Node)
}
