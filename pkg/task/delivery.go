package task

import (
	"context"
	"fmt"
	"time"
)

// Delivery steps: the delivery dimension (pending, streaming, truncated,
// delivered or failed) and the parts pushed. The leader's pusher records
// what the user has seen; a task stays in the undelivered index until its
// delivery is final.

// Frame is a frame the user was shown: its content's hash ("" for a
// status line, nothing new) and when it was acked.
type Frame struct {
	Hash string
	At   time.Time
}

// Shown records a progress frame (or the receipt) the user now sees:
// its content hash when it changed, and when.
func (l *Lifecycle) Shown(ctx context.Context, id, hash string, at time.Time) (*Record, error) {
	return l.update(ctx, id, l.shown([]Frame{{Hash: hash, At: at}}))
}

// ShownFrom records frames (oldest first) starting from r as read at
// revision rev (task.Get): the pusher's step has just read the record, so
// when nobody wrote it since, recording costs one write and no read. A
// frame the record already has (not after its PushedAt) is not applied
// again, so frames kept unwritten (WithShown) go with the next write
// whatever it starts from; with none left, nothing is written. It returns
// the record and its revision after the write (the pusher keeps both, and
// its next step needs no read either). r is not changed.
func (l *Lifecycle) ShownFrom(ctx context.Context, r *Record, rev uint64, frames ...Frame) (*Record, uint64, error) {
	return updateFromRev(ctx, l.store.Tasks(), r, rev, l.shown(frames))
}

// WithShown is a copy of r with frames applied as ShownFrom writes them,
// written nowhere: the pusher writes a stream's progress frames every few
// seconds, not each, and keeps the record as the user sees it meanwhile.
// r is not changed.
func (l *Lifecycle) WithShown(r *Record, frames ...Frame) *Record {
	c := r.clone()
	_ = l.shown(frames)(c) // only a pending delivery's start can fail, and it cannot
	return c
}

func (l *Lifecycle) shown(frames []Frame) func(*Record) error { return l.rules().Shown(frames) }

// FinalIntent records that a final frame is about to be sent, so a new
// leader that finds it without an outcome knows the user may have it.
func (l *Lifecycle) FinalIntent(ctx context.Context, id string) (*Record, error) {
	return l.update(ctx, id, finalIntent)
}

// FinalIntentFrom is FinalIntent starting from r as read at revision rev
// (the pusher's step has just read it): when nobody wrote the record
// since, one write and no read stand between the final answer and its
// frame. It returns the record and its revision after the write, for
// DeliveredFrom. r is not changed.
func (l *Lifecycle) FinalIntentFrom(ctx context.Context, r *Record, rev uint64) (*Record, uint64, error) {
	return updateFromRev(ctx, l.store.Tasks(), r, rev, finalIntent)
}

func finalIntent(r *Record) error {
	if r.FinalPending || r.Delivery.Finished() {
		return ErrNoChange // a finished delivery: the caller sends nothing
	}
	r.FinalPending = true
	return nil
}

// Truncate records that the stream is closed (or unusable) before the
// answer was complete: the complete answer is owed by push.
func (l *Lifecycle) Truncate(ctx context.Context, id, why string) (*Record, error) {
	return l.update(ctx, id, l.rules().Truncate(why))
}

// PartPushed records that the first n parts of the answer pushed from
// record from (as the push read it) are acked. Monotonic within one push:
// the count never goes back (a late write, from a slower step or a deposed
// leader, leaves a higher count alone), and a write for another push (the
// task retried since from was read, or its delivery reopened: another
// Attempt or PushRound) changes nothing and returns ErrPushSuperseded,
// so that it cannot make the new push skip parts it never sent.
func (l *Lifecycle) PartPushed(ctx context.Context, from *Record, n int) (*Record, error) {
	return l.update(ctx, from.ID, l.rules().PartPushed(from, n))
}

// samePush fences a delivery step to the push it began from:
// ErrPushSuperseded when cur (the record now) is of another attempt or
// push round than from (the record the step read).
func samePush(cur, from *Record) error {
	if cur.Attempt != from.Attempt || cur.PushRound != from.PushRound {
		return fmt.Errorf("%w: task %s is at attempt %d, push round %d; the push began at attempt %d, round %d",
			ErrPushSuperseded, cur.ID, cur.Attempt, cur.PushRound, from.Attempt, from.PushRound)
	}
	return nil
}

// Delivered records that the user has the ending (text, whose hash is
// kept), and takes the task out of the undelivered index. from is the
// record the delivery began from: a delivery of another push (the task
// retried, or its delivery reopened since) records nothing and returns
// ErrPushSuperseded, as PartPushed does.
func (l *Lifecycle) Delivered(ctx context.Context, from *Record, text, why string, parts int) (*Record, error) {
	r, err := l.update(ctx, from.ID, l.deliver(from, text, why, parts))
	return l.delivered(ctx, r, err)
}

// DeliveredFrom is Delivered starting from r as read (or written, by
// FinalIntentFrom) at revision rev: no read when nobody wrote it since.
// r is not changed.
func (l *Lifecycle) DeliveredFrom(ctx context.Context, r *Record, rev uint64, text, why string, parts int) (*Record, error) {
	next, err := updateFrom(ctx, l.store.Tasks(), r, rev, l.deliver(r, text, why, parts))
	return l.delivered(ctx, next, err)
}

func (l *Lifecycle) deliver(from *Record, text, why string, parts int) func(*Record) error {
	return l.rules().Deliver(from, text, why, parts)
}

// delivered takes a delivered task out of the undelivered index.
func (l *Lifecycle) delivered(ctx context.Context, r *Record, err error) (*Record, error) {
	if err != nil {
		return r, err
	}
	if err := l.store.ClearUndelivered(ctx, r.Bot, r.ID); err != nil {
		l.log.Debug().Err(err).Str("task", r.ID).Msg("undelivered index not cleared; the next rebuild drops it")
	}
	return r, nil
}

// SendFailed counts a failed send about the task itself (not the
// connection: see wecom); at maxAttempts the delivery fails for good and
// the task leaves the undelivered index.
func (l *Lifecycle) SendFailed(ctx context.Context, id string, sendErr error, maxAttempts int) (*Record, error) {
	r, err := l.update(ctx, id, l.rules().SendFailed(sendErr, maxAttempts))
	if err == nil && r.Delivery == DeliveryFailed {
		l.store.ClearUndelivered(ctx, r.Bot, r.ID)
	}
	return r, err
}

// ExpiredPrefix starts the delivery reason of an answer that expired
// undelivered (Expired).
const ExpiredPrefix = "expired undelivered: "

// Expired fails the delivery of an answer owed by push for longer than
// the replay expiry: sending it that late would confuse more than help.
func (l *Lifecycle) Expired(ctx context.Context, id string, owedFor time.Duration) (*Record, error) {
	r, err := l.update(ctx, id, l.rules().Expired(owedFor))
	if err == nil && r.Delivery == DeliveryFailed {
		l.store.ClearUndelivered(ctx, r.Bot, r.ID)
	}
	return r, err
}

// Forget takes a task out of bot's undelivered index (its record expired, or
// its delivery is final and the index entry was left behind).
func (l *Lifecycle) Forget(ctx context.Context, bot, id string) error {
	return l.store.ClearUndelivered(ctx, bot, id)
}
