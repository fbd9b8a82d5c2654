// Package lifecyclefake is an in-memory keeper of task records with the
// methods of *task.Lifecycle that the data plane's consumers declare
// (pkg/access's Records, pkg/pusher's Deliveries, pkg/heal/health's
// Records) and the execution steps around them (Start, Finish, Fail,
// Cancel, Retry, Redeliver). Every change of a record is task.Rules',
// the rules the real lifecycle applies under the bucket's
// compare-and-set: the fake keeps the records, the undelivered index,
// the conversations' queue messages and the notices, and decides
// nothing of its own. internal/lifecyclecontract runs one suite over it
// and over *task.Lifecycle on real NATS.
//
// What it does not keep: the tasks' output (an attempt off the queue is
// alive while its record changed within OffQueueSilence), the workers'
// cancel announcements, and JetStream's failures.
package lifecyclefake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Notice is one announcement of a change the pusher must act on: the
// task's id and, when the real lifecycle carries it (a finished
// attempt), the record as written.
type Notice struct {
	ID     string
	Record *task.Record
}

// Corrupted is one Corrupt report.
type Corrupted struct {
	Bot, ID, Where string
	Err            error
}

// Fake is the in-memory lifecycle. Its zero value is not usable: New.
type Fake struct {
	rules task.Rules
	// OffQueueSilence: an attempt off the queue whose record changed
	// within it is alive (task.DefaultOffQueueSilence).
	OffQueueSilence time.Duration

	mu          sync.Mutex
	rev         uint64
	records     map[string]entry           // id → the record as stored
	undelivered map[string]map[string]bool // bot → ids in the undelivered index
	queue       map[string]queued          // bot\x00chat → the conversation's queue message
	subs        map[string][]chan Notice   // bot → notice subscribers
	corrupt     []Corrupted
	seq         uint64
}

type entry struct {
	raw []byte
	rev uint64
}

type queued struct {
	m   task.Message
	seq uint64
}

// New is an empty Fake writing as node, reading time from c (nil:
// clock.Real).
func New(node string, c clock.PassiveClock) *Fake {
	if c == nil {
		c = clock.Real
	}
	return &Fake{rules: task.Rules{Node: node, Clock: c}, OffQueueSilence: task.DefaultOffQueueSilence,
		records: map[string]entry{}, undelivered: map[string]map[string]bool{}, queue: map[string]queued{}, subs: map[string][]chan Notice{}}
}

func notFound(id string) error { return fmt.Errorf("task %s: %w", id, natsjs.ErrKeyNotFound) }

// read decodes id's record; f.mu held.
func (f *Fake) read(id string) (*task.Record, uint64, error) {
	e, ok := f.records[id]
	if !ok {
		return nil, 0, notFound(id)
	}
	var r task.Record
	if err := json.Unmarshal(e.raw, &r); err != nil {
		return nil, 0, fmt.Errorf("task %s: %w: %w", id, task.ErrCorruptRecord, err)
	}
	return &r, e.rev, nil
}

// write stores r as its next revision; f.mu held.
func (f *Fake) write(r *task.Record) (uint64, error) {
	raw, err := schema.Marshal(r)
	if err != nil {
		return 0, err
	}
	f.rev++
	f.records[r.ID] = entry{raw: raw, rev: f.rev}
	return f.rev, nil
}

// update applies change to id's record as stored, as the real update
// does once its compare-and-set holds: task.ErrNoChange writes nothing
// and returns the record as read; another error returns it with that
// error.
func (f *Fake) update(id string, change func(*task.Record) error) (*task.Record, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, rev, err := f.read(id)
	if err != nil {
		return nil, 0, err
	}
	if err := change(r); err != nil {
		if errors.Is(err, task.ErrNoChange) {
			return r, rev, nil
		}
		return r, rev, err
	}
	rev, err = f.write(r)
	if err != nil {
		return nil, 0, err
	}
	return r, rev, nil
}

func (f *Fake) index(bot, id string, in bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !in {
		delete(f.undelivered[bot], id)
		return
	}
	if f.undelivered[bot] == nil {
		f.undelivered[bot] = map[string]bool{}
	}
	f.undelivered[bot][id] = true
}

// notice announces r to its bot's subscribers (a full subscriber misses
// it, as a slow core NATS one may).
func (f *Fake) notice(r *task.Record, withRecord bool) {
	n := Notice{ID: r.ID}
	if withRecord {
		n.Record = r.Clone()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.subs[r.Bot] {
		select {
		case ch <- n:
		default:
		}
	}
}

// Notices subscribes to bot's notices until stop is called, which closes
// the channel.
func (f *Fake) Notices(bot string) (notices <-chan Notice, stop func()) {
	ch := make(chan Notice, 256)
	f.mu.Lock()
	f.subs[bot] = append(f.subs[bot], ch)
	f.mu.Unlock()
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, c := range f.subs[bot] {
			if c == ch {
				f.subs[bot] = append(f.subs[bot][:i], f.subs[bot][i+1:]...)
				close(ch)
				return
			}
		}
	}
}

// UndeliveredTasks lists bot's undelivered index, sorted.
func (f *Fake) UndeliveredTasks(_ context.Context, bot string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, 0, len(f.undelivered[bot]))
	for id := range f.undelivered[bot] {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}

// Enqueue puts m as its conversation's queue message, as the dispatch's
// publish does; ErrConversationBusy when the conversation holds one.
func (f *Fake) Enqueue(m task.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := m.Bot + "\x00" + m.Chat
	if _, ok := f.queue[k]; ok {
		return fmt.Errorf("%w: %s", task.ErrConversationBusy, m.Chat)
	}
	f.seq++
	f.queue[k] = queued{m: m, seq: f.seq}
	return nil
}

// Locked reports whether conversation chat of bot holds a queue message.
func (f *Fake) Locked(bot, chat string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.queue[bot+"\x00"+chat]
	return ok
}

// Corrupted are the Corrupt reports so far.
func (f *Fake) Corrupted() []Corrupted {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Corrupted(nil), f.corrupt...)
}

// release removes the conversation's queue message if it is r's.
func (f *Fake) release(r *task.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := r.Bot + "\x00" + r.Chat
	if q, ok := f.queue[k]; ok && q.m.TaskID == r.ID {
		delete(f.queue, k)
	}
}

// Get reads task id's record.
func (f *Fake) Get(_ context.Context, id string) (*task.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, _, err := f.read(id)
	return r, err
}

// Open records r, or merges the leader's fields into the record there is
// (task.Rules.Merge); an unfinished delivery is indexed as undelivered.
func (f *Fake) Open(_ context.Context, r *task.Record) (*task.Record, error) {
	f.mu.Lock()
	_, exists := f.records[r.ID]
	var err error
	cur := r
	if !exists {
		_, err = f.write(r)
	}
	f.mu.Unlock()
	if exists {
		cur, _, err = f.update(r.ID, f.rules.Merge(r))
	}
	if err != nil {
		return nil, err
	}
	if !cur.Delivery.Finished() {
		f.index(cur.Bot, cur.ID, true)
	}
	return cur, nil
}

// Receive opens r to be received by until.
func (f *Fake) Receive(ctx context.Context, r *task.Record, until time.Time) (*task.Record, error) {
	r.ReceivingUntil = until.UTC()
	return f.Open(ctx, r)
}

// Unreceived removes a record still being received.
func (f *Fake) Unreceived(_ context.Context, id string) (bool, error) {
	f.mu.Lock()
	r, _, err := f.read(id)
	if err != nil {
		f.mu.Unlock()
		return false, err
	}
	if !r.Receiving() {
		f.mu.Unlock()
		return false, nil
	}
	delete(f.records, id)
	f.mu.Unlock()
	f.index(r.Bot, id, false)
	return true, nil
}

func (f *Fake) offQueueAlive(r *task.Record) bool {
	return task.RunsOffQueue(r) && f.rules.Clock.Now().Sub(r.Updated) <= f.OffQueueSilence
}

// OffQueue reads id's record and whether its attempt off the queue is
// alive.
func (f *Fake) OffQueue(ctx context.Context, id string) (*task.Record, bool, error) {
	r, err := f.Get(ctx, id)
	if err != nil {
		return nil, false, err
	}
	return r, f.offQueueAlive(r), nil
}

// Start begins an attempt (task.Rules.Start), opening the record from m
// when there is none.
func (f *Fake) Start(ctx context.Context, m task.Message, tier string, deliveries int) (int, *task.Record, error) {
	cur, err := f.Get(ctx, m.TaskID)
	switch {
	case errors.Is(err, natsjs.ErrKeyNotFound):
		if _, err := f.Open(ctx, task.RecordOf(m)); err != nil {
			return 0, nil, err
		}
		cur = nil
	case err != nil:
		return 0, nil, err
	case deliveries > 0 && f.offQueueAlive(cur):
		return 0, cur, fmt.Errorf("%w: attempt %d on %s (tier %s)", task.ErrRunningOffQueue, cur.Attempt, cur.Node, cur.Tier)
	}
	seen, indexed := 0, false
	if cur != nil {
		seen = cur.Attempt
		if cur.NotIndexed {
			f.index(cur.Bot, cur.ID, true)
			indexed = true
		}
	}
	var attempt int
	r, _, err := f.update(m.TaskID, f.rules.Start(tier, deliveries, seen, indexed, &attempt))
	if err != nil {
		return 0, r, err
	}
	return attempt, r, nil
}

// Finish records attempt's answer (task.Rules.Finish) and announces it
// with the record.
func (f *Fake) Finish(_ context.Context, id string, attempt int, text string, steps ...task.BackendStep) (*task.Record, error) {
	r, _, err := f.update(id, f.rules.Finish(attempt, text, steps))
	if err != nil {
		return r, err
	}
	f.notice(r, true)
	return r, nil
}

// Fail records attempt's failure (task.Rules.Fail); for good, the
// conversation is freed and the change announced.
func (f *Fake) Fail(_ context.Context, id string, attempt int, reason string, retry bool, steps ...task.BackendStep) (*task.Record, error) {
	r, _, err := f.update(id, f.rules.Fail(attempt, reason, retry, steps))
	if err != nil || retry {
		return r, err
	}
	f.release(r)
	f.notice(r, false)
	return r, nil
}

// Refused fails a task refused late (task.Rules.Refused), created
// refused when it has no record.
func (f *Fake) Refused(ctx context.Context, m task.Message, reason string, busy bool) (*task.Record, error) {
	return f.refused(ctx, m, f.rules.Refused(reason, busy))
}

// RefusedSaying is Refused whose answer is text (task.Rules.RefusedSaying).
func (f *Fake) RefusedSaying(ctx context.Context, m task.Message, text string) (*task.Record, error) {
	return f.refused(ctx, m, f.rules.RefusedSaying(text))
}

// refused makes a fresh record of m refused by change, opens it (or
// merges it into the record there is) and applies change to that.
func (f *Fake) refused(ctx context.Context, m task.Message, change func(*task.Record) error) (*task.Record, error) {
	fresh := task.RecordOf(m)
	if err := change(fresh); err != nil {
		return nil, err
	}
	if _, err := f.Open(ctx, fresh); err != nil {
		return nil, err
	}
	r, _, err := f.update(m.TaskID, change)
	if err == nil && r.Exec == task.Failed {
		f.notice(r, false)
	}
	return r, err
}

// Cancel cancels an unfinished task (task.Rules.Cancel), frees its
// conversation and announces it.
func (f *Fake) Cancel(_ context.Context, id, reason string) (*task.Record, error) {
	r, _, err := f.update(id, f.rules.Cancel(reason))
	if err != nil {
		return r, err
	}
	f.release(r)
	f.notice(r, false)
	return r, nil
}

// Retry queues a finished task again (task.Rules.Retry) with a new queue
// message; ErrNotFinished, ErrConversationBusy: nothing done.
func (f *Fake) Retry(ctx context.Context, id, reason string) (*task.Record, error) {
	r, err := f.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !r.Exec.Finished() {
		return r, fmt.Errorf("%w: task %s is %s", task.ErrNotFinished, id, r.Exec)
	}
	if f.Locked(r.Bot, r.Chat) {
		return r, fmt.Errorf("%w: %s", task.ErrConversationBusy, r.Chat)
	}
	if r, _, err = f.update(id, f.rules.Retry(id, reason)); err != nil {
		return r, err
	}
	f.index(r.Bot, r.ID, true)
	if err := f.Enqueue(task.MessageOf(r)); err != nil {
		why := "retry not queued: " + err.Error()
		f.update(id, f.rules.RetryNotQueued(why))
		return r, fmt.Errorf("retry task %s: %w (the task is marked failed; retry again)", id, err)
	}
	f.notice(r, false)
	return r, nil
}

// Redeliver reopens a finished task's delivery (task.Rules.Redeliver).
func (f *Fake) Redeliver(_ context.Context, id, reason string) (*task.Record, error) {
	r, _, err := f.update(id, f.rules.Redeliver(id, reason))
	if err != nil {
		return r, err
	}
	f.index(r.Bot, r.ID, true)
	f.notice(r, false)
	return r, nil
}

// Stop cancels the task holding conversation chat of bot and removes
// its queue message.
func (f *Fake) Stop(ctx context.Context, bot, chat, reason string) (task.Released, error) {
	rel := task.Released{Bot: bot, Chat: chat, Record: "none"}
	f.mu.Lock()
	q, ok := f.queue[bot+"\x00"+chat]
	delete(f.queue, bot+"\x00"+chat)
	f.mu.Unlock()
	if !ok {
		return rel, nil
	}
	rel.Seq, rel.Removed, rel.Task = q.seq, true, q.m.TaskID
	r, err := f.Get(ctx, q.m.TaskID)
	opened := ""
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		r, err = f.Open(ctx, task.RecordOf(q.m))
		opened = "opened and "
	}
	switch {
	case err != nil:
		rel.Record, rel.Error = "not written", err.Error()
	case r.Exec.Finished():
		rel.Record = "already " + string(r.Exec)
	default:
		r, err = f.Cancel(ctx, r.ID, reason)
		switch {
		case errors.Is(err, task.ErrFinished) && r != nil:
			rel.Record = "already " + string(r.Exec)
		case err != nil:
			rel.Record, rel.Error = "not written", err.Error()
		default:
			rel.Record = opened + string(r.Exec)
		}
	}
	return rel, nil
}

// ShownFrom records frames shown (task.Rules.Shown). r and rev are the
// caller's read: the fake applies the change to the record as stored, as
// the real one does once its compare-and-set is refused.
func (f *Fake) ShownFrom(_ context.Context, r *task.Record, _ uint64, frames ...task.Frame) (*task.Record, uint64, error) {
	return f.update(r.ID, f.rules.Shown(frames))
}

// WithShown is r with frames applied, written nowhere.
func (f *Fake) WithShown(r *task.Record, frames ...task.Frame) *task.Record {
	c := r.Clone()
	_ = f.rules.Shown(frames)(c)
	return c
}

// FinalIntentFrom records a final frame about to be sent.
func (f *Fake) FinalIntentFrom(_ context.Context, r *task.Record, _ uint64) (*task.Record, uint64, error) {
	return f.update(r.ID, f.rules.FinalIntent())
}

// delivered takes a delivered task out of the undelivered index.
func (f *Fake) delivered(r *task.Record, err error) (*task.Record, error) {
	if err != nil {
		return r, err
	}
	f.index(r.Bot, r.ID, false)
	return r, nil
}

// Delivered records the ending delivered (task.Rules.Deliver).
func (f *Fake) Delivered(_ context.Context, from *task.Record, text, why string, parts int) (*task.Record, error) {
	r, _, err := f.update(from.ID, f.rules.Deliver(from, text, why, parts))
	return f.delivered(r, err)
}

// DeliveredFrom is Delivered from r as read.
func (f *Fake) DeliveredFrom(_ context.Context, r *task.Record, _ uint64, text, why string, parts int) (*task.Record, error) {
	next, _, err := f.update(r.ID, f.rules.Deliver(r, text, why, parts))
	return f.delivered(next, err)
}

// Truncate records the stream closed before the answer was complete.
func (f *Fake) Truncate(_ context.Context, id, why string) (*task.Record, error) {
	r, _, err := f.update(id, f.rules.Truncate(why))
	return r, err
}

// PartPushed records parts of a push acked.
func (f *Fake) PartPushed(_ context.Context, from *task.Record, n int) (*task.Record, error) {
	r, _, err := f.update(from.ID, f.rules.PartPushed(from, n))
	return r, err
}

// SendFailed counts a failed send; a delivery failed for good leaves
// the index.
func (f *Fake) SendFailed(_ context.Context, id string, sendErr error, maxAttempts int) (*task.Record, error) {
	r, _, err := f.update(id, f.rules.SendFailed(sendErr, maxAttempts))
	if err == nil && r.Delivery == task.DeliveryFailed {
		f.index(r.Bot, r.ID, false)
	}
	return r, err
}

// Expired fails the delivery of an answer owed too long.
func (f *Fake) Expired(_ context.Context, id string, owedFor time.Duration) (*task.Record, error) {
	r, _, err := f.update(id, f.rules.Expired(owedFor))
	if err == nil && r.Delivery == task.DeliveryFailed {
		f.index(r.Bot, r.ID, false)
	}
	return r, err
}

// Forget takes a task out of bot's undelivered index.
func (f *Fake) Forget(_ context.Context, bot, id string) error {
	f.index(bot, id, false)
	return nil
}

// Corrupt keeps the report (Corrupted).
func (f *Fake) Corrupt(bot, id, where string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.corrupt = append(f.corrupt, Corrupted{Bot: bot, ID: id, Where: where, Err: err})
}

// Feedback records a user's verdict (task.Rules.Feedback);
// ErrFeedbackCounted for an event counted already.
func (f *Fake) Feedback(_ context.Context, bot, id, msgid string, fb task.Feedback) (*task.Record, error) {
	counted := false
	r, _, err := f.update(id, f.rules.Feedback(bot, id, msgid, fb, &counted))
	if err == nil && counted {
		return r, fmt.Errorf("%w: feedback_event %s of task %s", task.ErrFeedbackCounted, msgid, id)
	}
	return r, err
}
