package pusher

// The ledger: every write of a task record the pusher makes goes through
// it, so the record cache (active.go) cannot be left stale by a write
// that forgot to drop it. A progress frame's write (shown) keeps the
// record it wrote, with its revision; every other write drops the cached
// record, and the next step reads what the write left.

import (
	"context"
	"slices"
	"time"

	"github.com/botctl/botctl/pkg/task"
)

type ledger struct{ p *Pusher }

// shown records a progress frame (hash "" for a heartbeat) and caches the
// record written; a failed write drops the cache. A frame shown within
// shownWriteEvery of the last one written is kept in the task's entry
// instead (the cache holds the record as the user sees it), and goes with
// the next write.
func (l ledger) shown(ctx context.Context, r *task.Record, rev uint64, hash string, at time.Time) error {
	frames, write := l.p.frameShown(r, rev, task.Frame{Hash: hash, At: at})
	if !write {
		return nil
	}
	next, nextRev, err := l.p.cfg.Lifecycle.ShownFrom(ctx, r, rev, frames...)
	if err != nil {
		l.p.forget(r.ID)
		return err
	}
	l.p.remember(r.ID, next, nextRev)
	return nil
}

// shownWriteEvery: a stream's progress frames are written to its record
// at most this often, not each. A record write is a JetStream write
// replicated to every server, and its ack: one per frame was most of an
// answer's record writes (bench/ops-per-answer.md). The frames between
// are kept in the task's entry and go with its next record write, of any
// kind (task.Lifecycle.ShownFrom applies what the record lacks). What is
// lost with a term is at most this span of frames at the progress pace,
// and a new leader counts them as sent (assumedSends): WeCom's quota
// holds; the user may see one frame's content again, in a pushed answer.
const shownWriteEvery = 10 * time.Second

func (l ledger) finalIntent(ctx context.Context, r *task.Record, rev uint64) (*task.Record, uint64, error) {
	l.p.forget(r.ID)
	return l.p.cfg.Lifecycle.FinalIntentFrom(ctx, r, rev)
}

func (l ledger) deliveredFrom(ctx context.Context, r *task.Record, rev uint64, text, why string, parts int) (*task.Record, error) {
	l.p.forget(r.ID)
	return l.p.cfg.Lifecycle.DeliveredFrom(ctx, r, rev, text, why, parts)
}

func (l ledger) delivered(ctx context.Context, from *task.Record, text, why string, parts int) (*task.Record, error) {
	l.p.forget(from.ID)
	return l.p.cfg.Lifecycle.Delivered(ctx, from, text, why, parts)
}

func (l ledger) truncate(ctx context.Context, id, why string) (*task.Record, error) {
	l.p.forget(id)
	return l.p.cfg.Lifecycle.Truncate(ctx, id, why)
}

// partPushed records that the first n parts of the answer pushed from r
// are acked: in this pusher's memory first (acked), then in the record.
//
// Why the memory, and not an intent written before each send (as the
// final frame's FinalPending): WeCom has no query for what a user saw,
// so an intent without an outcome cannot tell "sent and acked, but the
// count was not written" from "never sent", and a leader that skipped on
// the intent would leave the user without a part for good; this design
// errs toward a duplicate, never toward a skip. The memory is exact for
// the one pusher that saw the ack: when the count's write fails (the
// bucket away, a timeout), its next step writes the count again and sends
// nothing twice. What it does not cover is a failover in the moment
// between an ack and its write (the term ends, the memory with it): the
// next leader finds the record's count and pushes that part again, the
// same window as a final frame's. A write that comes late, from a
// deposed leader's step still in flight or from before a retry or
// redeliver, is fenced by the record (task.Lifecycle.PartPushed: never
// back, never for another push).
func (l ledger) partPushed(ctx context.Context, r *task.Record, n int) (*task.Record, error) {
	l.p.ackedPart(r, n)
	l.p.forget(r.ID)
	return l.p.cfg.Lifecycle.PartPushed(ctx, r, n)
}

// acked is how many parts of the answer pushed from r this pusher saw
// acked: more than r.PushedParts when a count's write failed (partPushed).
func (l ledger) acked(r *task.Record) int {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	en := l.p.active[r.ID]
	if en == nil || en.acked.attempt != r.Attempt || en.acked.round != r.PushRound {
		return r.PushedParts
	}
	return max(en.acked.n, r.PushedParts)
}

func (l ledger) sendFailed(ctx context.Context, id string, sendErr error, maxAttempts int) (*task.Record, error) {
	l.p.forget(id)
	return l.p.cfg.Lifecycle.SendFailed(ctx, id, sendErr, maxAttempts)
}

func (l ledger) expired(ctx context.Context, id string, owedFor time.Duration) (*task.Record, error) {
	l.p.forget(id)
	return l.p.cfg.Lifecycle.Expired(ctx, id, owedFor)
}

// assumedSends is what r says was sent to its conversation in WeCom's
// quota window, and the progress frames a previous leader may have sent
// after the last it wrote (shownWriteEvery: one per progress gap, for that
// span after the record's PushedAt, up to now). Counting frames that were
// perhaps never sent errs on the quota's side.
func (p *Pusher) assumedSends(r *task.Record) []time.Time {
	return assumedSends(r, p.rules.Gap, p.cfg.Now())
}

// assumedSends is what r says was sent, and the frames a previous leader
// may have sent unwritten at the progress gap gap, up to now: a pure
// decision, as the plan's (plan.go).
func assumedSends(r *task.Record, gap time.Duration, now time.Time) []time.Time {
	sends := slices.Clone(r.RecentSends)
	if r.Delivery != task.Streaming || r.PushedAt.IsZero() {
		return sends
	}
	for t := r.PushedAt.Add(gap); !t.After(r.PushedAt.Add(shownWriteEvery)) && !t.After(now); t = t.Add(gap) {
		sends = append(sends, t)
	}
	return sends
}
