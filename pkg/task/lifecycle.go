package task

import (
	"context"
	"errors"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/rs/zerolog"
)

// Lifecycle is the one owner of task records: every change of a record,
// by the leader's inbound path, a worker, the pusher, the sweep or an
// operator, is one of its operations, each a single compare-and-set step
// on the record (retried on conflict) followed by what the step implies
// for the queue (a conversation freed) and for the others (a worker told
// to stop, the pusher woken). Nothing else writes the task bucket.
//
// The record is the only truth of where a task is: "the answer is over"
// is Exec.Finished(), never a flag in the output. The output bucket holds
// text, and whose attempt wrote it.
//
// Attempts are fenced. Start hands out the next attempt number; Finish
// and Fail take it back and refuse (ErrSuperseded) when a later Start has
// taken the task over, and so does the attempt's output writer. Two runs
// of one task at once (a publish that timed out but was stored plus a
// fallback tier, a redelivery while a slow worker is still alive) can
// therefore not both finish it, nor interleave their text: the newer one
// wins, the older one stops at its next write.
type Lifecycle struct {
	store *jetstream.Store
	node  string
	now   func() time.Time // the clock of every transition (WithClock: a test seam)
	log   zerolog.Logger
	quiet bool // announce nothing (tests of the paths that survive a lost announcement)
	// offQueueSilence: see WithOffQueueSilence.
	offQueueSilence time.Duration
	// sweepEvery: see WithSweepInterval.
	sweepEvery time.Duration
	timers     clock.Clock // what RunSweep and WatchMaxDeliveries wait on (WithTimers; nil: clock.Real)
	// owed are the endings this node still has to write: tasks whose
	// queue message was removed while their record could not say so
	// (release.go). Shared by every copy of the lifecycle.
	owed       *owedEndings
	corruption Corruption // hears of corrupt records skipped (WithCorruption; nil: logged only)
}

// Sentinel errors of the lifecycle; check with errors.Is.
var (
	// ErrFinished: the task's execution is over (succeeded, failed or
	// canceled); Start, Cancel and attempt steps change nothing. A worker
	// acks its message and moves on.
	ErrFinished = errors.New("task: already finished")
	// ErrNotFinished: Retry and Redeliver need a finished task; cancel it
	// first.
	ErrNotFinished = errors.New("task: not finished")
	// ErrSuperseded: a later attempt has taken the task over. The caller
	// must stop and write nothing more, and must not ack, nak or
	// terminate its queue message: the newer attempt holds it.
	ErrSuperseded = errors.New("task: superseded by a later attempt")
	// ErrConversationBusy: Retry found another task in the conversation.
	ErrConversationBusy = errors.New("task: conversation has a task queued or running")
	// ErrRunningOffQueue: Start, for a queue delivery, found the task's
	// latest attempt running off the queue (on a fallback tier) and alive.
	// Nothing was changed. The worker keeps the queue message, which holds
	// the conversation, until the task ends (see OffQueue).
	ErrRunningOffQueue = errors.New("task: running off the queue")
	// ErrPushSuperseded: a delivery step (PartPushed, Delivered) was for
	// a push that is over: the task was retried or its delivery reopened
	// since the step read the record. Nothing was changed; the caller
	// reads the record again and delivers from there.
	ErrPushSuperseded = errors.New("task: delivery reopened since the push began")
)

// DefaultOffQueueSilence is how long an attempt off the queue may show no
// sign of life before a queue delivery takes the task over (see
// WithOffQueueSilence).
const DefaultOffQueueSilence = 2 * time.Minute

// NewLifecycle is the lifecycle of store's tasks, acting as node (the
// name written in every transition: a node id, or "botctl" for the CLI).
func NewLifecycle(store *jetstream.Store, node string, log zerolog.Logger) *Lifecycle {
	return &Lifecycle{store: store, node: node, now: time.Now, log: log.With().Str("component", "lifecycle").Logger(),
		offQueueSilence: DefaultOffQueueSilence, sweepEvery: SweepInterval, owed: newOwedEndings()}
}

// WithSweepInterval returns a copy of l whose RunSweep sweeps every d
// (default SweepInterval; zero or less keeps it). A conversation whose
// task can never end stays busy at most its deadline plus d: shorter
// frees it sooner, at the cost of one listing of the queue (and a read
// of each queued task's record) per bot per d.
func (l *Lifecycle) WithSweepInterval(d time.Duration) *Lifecycle {
	c := *l
	if d > 0 {
		c.sweepEvery = d
	}
	return &c
}

// WithOffQueueSilence returns a copy of l on which an attempt off the
// queue counts as alive while its record or its output changed within d
// (default DefaultOffQueueSilence). Past it, its node is presumed dead
// with it, and a queue delivery of the task takes it over; the old
// attempt, if it lives after all, is fenced off (ErrSuperseded), so the
// cost of presuming too soon is work done twice, never a second answer.
func (l *Lifecycle) WithOffQueueSilence(d time.Duration) *Lifecycle {
	c := *l
	c.offQueueSilence = d
	return &c
}

// WithClock returns a copy of l that reads time from now (tests).
func (l *Lifecycle) WithClock(now func() time.Time) *Lifecycle {
	c := *l
	c.now = now
	return &c
}

// WithTimers returns a copy of l whose periodic work (RunSweep's rounds,
// WatchMaxDeliveries' retries) waits on c. Transitions are stamped by
// WithClock's now, not by c.
func (l *Lifecycle) WithTimers(c clock.Clock) *Lifecycle {
	cp := *l
	cp.timers = c
	return &cp
}

// Quiet returns a copy of l that announces nothing on core NATS: no
// cancel to workers, no notice to the pusher. For tests of the paths that
// must work when an announcement is lost (the periodic re-reads).
func (l *Lifecycle) Quiet() *Lifecycle {
	c := *l
	c.quiet = true
	return &c
}

// Get reads a task's record.
func (l *Lifecycle) Get(ctx context.Context, id string) (*Record, error) {
	r, _, err := Get(ctx, l.store.Tasks(), id)
	return r, err
}

func (l *Lifecycle) update(ctx context.Context, id string, fn func(*Record) error) (*Record, error) {
	return update(ctx, l.store.Tasks(), id, fn)
}
