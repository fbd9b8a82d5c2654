package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Term is one node's leadership of one bot's election, from winning until
// its context is cancelled. The exported fields describe it and must not be
// changed.
type Term struct {
	Bot, Node string
	Key       string           // the election key
	Lease     clientv3.LeaseID // the lease the key is bound to; new per term
	Rev       int64            // the term's revision: the key's CreateRevision
	Start     time.Time        // when the lease grant was sent, by this node's clock

	e      *Elector
	log    zerolog.Logger
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	lastRenew time.Time   // send time of the last successful renewal
	watchdog  *time.Timer // fires RenewDeadline after lastRenew
}

func newTerm(parent context.Context, e *Elector, lease clientv3.LeaseID, rev int64, start time.Time) *Term {
	ctx, cancel := context.WithCancelCause(parent)
	t := &Term{
		Bot: e.cfg.BotID, Node: e.cfg.NodeID, Key: e.key, Lease: lease, Rev: rev, Start: start,
		e:         e,
		ctx:       ctx,
		cancel:    cancel,
		log:       e.log.With().Int64("term", rev).Str("lease", leaseHex(lease)).Logger(),
		lastRenew: start,
	}
	t.mu.Lock()
	t.watchdog = time.AfterFunc(time.Until(start.Add(e.cfg.RenewDeadline)), t.renewDeadlinePassed)
	t.mu.Unlock()
	t.log.Info().Msg("became leader")
	t.wg.Add(3)
	go t.renew()
	go t.watch()
	go func() {
		defer t.wg.Done()
		<-ctx.Done() // for any reason, including the parent context
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
// ErrNotLeader, or the error of the term's parent context (the context
// given to Campaign, or to WithTermContext).
func (t *Term) Err() error {
	if t.ctx.Err() == nil {
		return nil
	}
	return context.Cause(t.ctx)
}

// Verify checks, with a linearizable read, that the election key is still
// this term's (same lease, same revision) and that the term has not ended.
// Call it right before every connect, and connect only if it returns nil:
// ErrNotLeader (wrapped) means another node may lead; any other error means
// leadership could not be confirmed. Finding the key not ours ends the term.
func (t *Term) Verify(ctx context.Context) error {
	if err := t.notLeader(); err != nil {
		return err
	}
	resp, err := t.e.cli.Get(ctx, t.Key)
	if err != nil {
		return fmt.Errorf("verify leadership of bot %s: %w", t.Bot, err)
	}
	if cause := t.notOurs(resp.Kvs); cause != nil {
		t.lose(cause)
		return cause
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

// Resign ends the term at once: it cancels the term's context (renewals
// stop), then revokes the lease, which deletes the election key if it is
// still ours, so another node can win within one campaign round instead of
// a TTL. Close the bot's connection, and let what it delivered be handled,
// before calling Resign: until then the lease is renewed, and once Resign
// is called the next leader may connect. Resign waits for the term's
// goroutines, like End. It is idempotent; if revoking fails the key expires
// within TTL anyway, and the error says so.
func (t *Term) Resign(ctx context.Context) error {
	t.lose(fmt.Errorf("%w: resigned", ErrNotLeader))
	defer t.End()
	_, err := t.e.cli.Revoke(ctx, t.Lease)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("resign bot %s: revoke lease %s (the key expires within %s): %w", t.Bot, leaseHex(t.Lease), t.e.cfg.TTL, err)
	}
	return nil
}

// End cancels the term's context without releasing the key (the lease then
// expires within TTL) and waits until the term's goroutines have returned.
// Idempotent.
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

// ended runs once, when the term's context is done.
func (t *Term) ended() {
	t.mu.Lock()
	t.watchdog.Stop()
	t.mu.Unlock()
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

// renew keeps the lease alive every RenewInterval. It uses one
// KeepAliveOnce per renewal, not clientv3's KeepAlive stream, because the
// term needs the send time of each renewal the server accepted: the
// server's expiry is at least TTL after it.
func (t *Term) renew() {
	defer t.wg.Done()
	cfg := t.e.cfg
	next := cfg.RenewInterval
	for {
		if sleep(t.ctx, next) != nil {
			return
		}
		if t.e.cli.Ctx().Err() != nil {
			t.lose(fmt.Errorf("%w: etcd client closed", ErrNotLeader))
			return
		}
		t.mu.Lock()
		deadline := t.lastRenew.Add(cfg.RenewDeadline)
		t.mu.Unlock()
		sent := time.Now()
		ctx, cancel := context.WithDeadline(t.ctx, deadline)
		resp, err := t.e.cli.KeepAliveOnce(ctx, t.Lease)
		cancel()
		switch {
		case err == nil && resp.TTL > 0:
			t.renewed(sent)
			next = cfg.RenewInterval
			continue
		case errors.Is(err, rpctypes.ErrLeaseNotFound) || err == nil:
			t.lose(fmt.Errorf("%w: lease %s expired on the server", ErrNotLeader, leaseHex(t.Lease)))
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

// watch ends the term when the election key is deleted or bound to
// another lease. If the watch breaks it re-reads the key and watches again.
func (t *Term) watch() {
	defer t.wg.Done()
	rev := t.Rev + 1
	for {
		ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(t.ctx))
		for wr := range t.e.cli.Watch(ctx, t.Key, clientv3.WithRev(rev)) {
			if wr.Err() != nil {
				break // the channel closes next; re-read below
			}
			for _, ev := range wr.Events {
				var kvs []*mvccpb.KeyValue
				if ev.Type == mvccpb.PUT {
					kvs = append(kvs, ev.Kv)
				}
				if cause := t.notOurs(kvs); cause != nil {
					cancel()
					t.lose(cause)
					return
				}
			}
			rev = wr.Header.Revision + 1
		}
		cancel()
		if sleep(t.ctx, t.e.cfg.RetryPeriod) != nil {
			return
		}
		gctx, gcancel := context.WithTimeout(t.ctx, t.e.cfg.RenewDeadline)
		resp, err := t.e.cli.Get(gctx, t.Key)
		gcancel()
		if err != nil {
			continue // renewal failing too ends the term in time
		}
		if cause := t.notOurs(resp.Kvs); cause != nil {
			t.lose(cause)
			return
		}
		rev = resp.Header.Revision + 1
	}
}

// notOurs says why kvs (the key's current state, empty if deleted) is not
// this term's key, or nil if it is.
func (t *Term) notOurs(kvs []*mvccpb.KeyValue) error {
	if len(kvs) == 0 {
		return fmt.Errorf("%w: election key %s was deleted", ErrNotLeader, t.Key)
	}
	kv := kvs[0]
	if clientv3.LeaseID(kv.Lease) != t.Lease || kv.CreateRevision != t.Rev {
		l := leaderInfo(kv)
		return fmt.Errorf("%w: election key %s now held by node %q (lease %s, term %d)", ErrNotLeader, t.Key, l.Node, leaseHex(l.Lease), l.Rev)
	}
	return nil
}
