// Package lifecyclecontract is one suite of the task lifecycle's
// guarantees, run over every keeper of task records: *task.Lifecycle on
// real NATS and internal/lifecyclefake. A keeper passes when every step
// leaves the record, the undelivered index, the conversation's queue
// message and the notices as the suite says.
package lifecyclecontract

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/task"
)

// Lifecycle is what the suite asks of a keeper of records: the methods
// the data plane's consumers declare (pkg/access, pkg/pusher,
// pkg/heal/health) and the execution steps around them.
type Lifecycle interface {
	Open(ctx context.Context, r *task.Record) (*task.Record, error)
	Get(ctx context.Context, id string) (*task.Record, error)
	Start(ctx context.Context, m task.Message, tier string, deliveries int) (int, *task.Record, error)
	Finish(ctx context.Context, id string, attempt int, text string, steps ...task.BackendStep) (*task.Record, error)
	Fail(ctx context.Context, id string, attempt int, reason string, retry bool, steps ...task.BackendStep) (*task.Record, error)
	Cancel(ctx context.Context, id, reason string) (*task.Record, error)
	Retry(ctx context.Context, id, reason string) (*task.Record, error)
	Redeliver(ctx context.Context, id, reason string) (*task.Record, error)
	Refused(ctx context.Context, m task.Message, reason string, busy bool) (*task.Record, error)
	RefusedSaying(ctx context.Context, m task.Message, text string) (*task.Record, error)
	Feedback(ctx context.Context, bot, id, msgid string, fb task.Feedback) (*task.Record, error)
	Receive(ctx context.Context, r *task.Record, until time.Time) (*task.Record, error)
	Unreceived(ctx context.Context, id string) (removed bool, err error)
	Stop(ctx context.Context, bot, chat, reason string) (task.Released, error)

	ShownFrom(ctx context.Context, r *task.Record, rev uint64, frames ...task.Frame) (*task.Record, uint64, error)
	WithShown(r *task.Record, frames ...task.Frame) *task.Record
	FinalIntentFrom(ctx context.Context, r *task.Record, rev uint64) (*task.Record, uint64, error)
	Delivered(ctx context.Context, from *task.Record, text, why string, parts int) (*task.Record, error)
	Truncate(ctx context.Context, id, why string) (*task.Record, error)
	PartPushed(ctx context.Context, from *task.Record, n int) (*task.Record, error)
	SendFailed(ctx context.Context, id string, sendErr error, maxAttempts int) (*task.Record, error)
	Expired(ctx context.Context, id string, owedFor time.Duration) (*task.Record, error)
	Forget(ctx context.Context, bot, id string) error
}

// Subject is one keeper under test, with what the suite observes beside
// its records.
type Subject struct {
	Lifecycle Lifecycle
	// Enqueue publishes m as its conversation's queue message (the
	// dispatch's publish); Locked reports whether the conversation holds
	// one.
	Enqueue func(m task.Message) error
	Locked  func(bot, chat string) bool
	// Undelivered lists bot's undelivered index.
	Undelivered func(bot string) []string
	// Notices subscribes to bot's notices.
	Notices func(bot string) <-chan Notice
}

// Notice is one notice: the task announced and, when the keeper sends
// it, the record as written (nil: the pusher reads it).
type Notice struct {
	ID     string
	Record *task.Record
}

// anyRev is the revision the suite says it read a record at: it does not
// know the real one, and a keeper must then apply the step to the record
// as it is (the real one's compare-and-set fails and it reads again).
const anyRev = 1

// bot is every case's bot; each case has conversations of its own.
const bot = "b"

// noticeWait is how long a notice may take (core NATS: generous).
const noticeWait = 10 * time.Second

// Run runs the suite over the keeper newSubject makes (once, for every
// case: each case uses conversations of its own).
func Run(t *testing.T, newSubject func(t *testing.T) Subject) {
	s := newSubject(t)
	c := &checker{s: s, ctx: context.Background(), notices: s.Notices(bot)}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, c *checker)
	}{
		{"Create", testCreate},
		{"StartFinish", testStartFinish},
		{"FailRetryThenForGood", testFail},
		{"Supersession", testSupersession},
		{"Cancel", testCancel},
		{"Retry", testRetry},
		{"Refused", testRefused},
		{"DeliveryStates", testDeliveryStates},
		{"DeliveryFailed", testDeliveryFailed},
		{"Feedback", testFeedback},
		{"Receiving", testReceiving},
		{"Stop", testStop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.drainNotices()
			tc.run(t, c)
		})
	}
}

type checker struct {
	s       Subject
	ctx     context.Context
	notices <-chan Notice
	n       int
}

func (c *checker) lc() Lifecycle { return c.s.Lifecycle }

// message is a fresh task of a conversation of its own.
func (c *checker) message(t *testing.T) (*task.Record, task.Message) {
	t.Helper()
	c.n++
	chat := fmt.Sprintf("%s-%d", strings.ToLower(t.Name()[strings.LastIndex(t.Name(), "/")+1:]), c.n)
	r := task.New(bot, "m-"+chat, time.Now())
	r.Chat, r.ChatType, r.User, r.Question = chat, "single", chat, "q "+chat
	return r, task.MessageOf(r)
}

// queued is a task enqueued and opened, as the leader does.
func (c *checker) queued(t *testing.T) task.Message {
	t.Helper()
	r, m := c.message(t)
	if err := c.s.Enqueue(m); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	if _, err := c.lc().Open(c.ctx, r); err != nil {
		t.Fatalf("open: %v", err)
	}
	return m
}

func (c *checker) start(t *testing.T, m task.Message, deliveries int) int {
	t.Helper()
	a, r, err := c.lc().Start(c.ctx, m, "queue", deliveries)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if r.Exec != task.Running || r.Attempt != a {
		t.Fatalf("after start: exec %s attempt %d, want running at %d", r.Exec, r.Attempt, a)
	}
	return a
}

func (c *checker) get(t *testing.T, id string) *task.Record {
	t.Helper()
	r, err := c.lc().Get(c.ctx, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return r
}

func (c *checker) undelivered(id string) bool { return slices.Contains(c.s.Undelivered(bot), id) }

// drainNotices drops the notices of earlier cases.
func (c *checker) drainNotices() {
	for {
		select {
		case <-c.notices:
		default:
			return
		}
	}
}

// noticed waits for a notice of id (others are skipped).
func (c *checker) noticed(t *testing.T, id, after string) Notice {
	t.Helper()
	deadline := time.After(noticeWait)
	for {
		select {
		case got := <-c.notices:
			if got.ID == id {
				return got
			}
		case <-deadline:
			t.Fatalf("no notice of task %s after %s within %s", id, after, noticeWait)
		}
	}
}

func wantErr(t *testing.T, step string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", step, err, want)
	}
}

// An opened task is queued and pending, in the undelivered index; a
// second Open merges the leader's fields and changes nothing else.
func testCreate(t *testing.T, c *checker) {
	r, _ := c.message(t)
	got, err := c.lc().Open(c.ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if got.Exec != task.Queued || got.Delivery != task.Pending || got.Attempt != 0 {
		t.Fatalf("opened: exec %s delivery %s attempt %d", got.Exec, got.Delivery, got.Attempt)
	}
	if !c.undelivered(r.ID) {
		t.Fatalf("opened task %s not in the undelivered index", r.ID)
	}
	again := *r
	again.ReqID, again.Question = "req-1", "another question"
	if _, err := c.lc().Open(c.ctx, &again); err != nil {
		t.Fatal(err)
	}
	if cur := c.get(t, r.ID); cur.ReqID != "req-1" || cur.Question != r.Question || cur.Exec != task.Queued {
		t.Fatalf("merged: req %q question %q exec %s", cur.ReqID, cur.Question, cur.Exec)
	}
	if _, err := c.lc().Get(c.ctx, "t_none"); err == nil {
		t.Fatal("get of a task never opened: no error")
	}
}

// An attempt runs and finishes with its answer, announced with the
// record; a finished
// task takes no further step of any attempt.
func testStartFinish(t *testing.T, c *checker) {
	m := c.queued(t)
	a := c.start(t, m, 1)
	if a != 1 {
		t.Fatalf("first attempt is %d", a)
	}
	r, err := c.lc().Finish(c.ctx, m.TaskID, a, "the answer")
	if err != nil {
		t.Fatal(err)
	}
	if r.Exec != task.Succeeded || r.AnswerHash != task.Hash("the answer") || r.AnswerBytes != len("the answer") {
		t.Fatalf("finished: exec %s hash %q bytes %d", r.Exec, r.AnswerHash, r.AnswerBytes)
	}
	// The finish's notice carries the record as written: the pusher
	// steps the ending without a read of its own.
	if n := c.noticed(t, m.TaskID, "finish"); n.Record == nil || n.Record.Exec != task.Succeeded || n.Record.AnswerHash != r.AnswerHash {
		t.Fatalf("finish notice: record %+v, want the succeeded record", n.Record)
	}
	_, err = c.lc().Finish(c.ctx, m.TaskID, a, "again")
	wantErr(t, "second finish", err, task.ErrFinished)
	_, _, err = c.lc().Start(c.ctx, m, "queue", 2)
	wantErr(t, "start of a finished task", err, task.ErrFinished)
	if !c.undelivered(m.TaskID) {
		t.Fatal("a finished task left the undelivered index before its delivery")
	}
}

// A failed attempt with retry is queued again (no notice needed); the
// next attempt failing for good fails the task, frees its conversation
// and is announced.
func testFail(t *testing.T, c *checker) {
	m := c.queued(t)
	a := c.start(t, m, 1)
	r, err := c.lc().Fail(c.ctx, m.TaskID, a, "backend down", true)
	if err != nil {
		t.Fatal(err)
	}
	if r.Exec != task.Queued || r.Error != "backend down" {
		t.Fatalf("failed with retry: exec %s error %q", r.Exec, r.Error)
	}
	b := c.start(t, m, 2)
	if b != a+1 {
		t.Fatalf("next attempt %d after %d", b, a)
	}
	if r, err = c.lc().Fail(c.ctx, m.TaskID, b, "still down", false); err != nil {
		t.Fatal(err)
	}
	if r.Exec != task.Failed {
		t.Fatalf("failed for good: exec %s", r.Exec)
	}
	c.noticed(t, m.TaskID, "fail")
	if c.s.Locked(bot, m.Chat) {
		t.Fatal("a task failed for good still holds its conversation")
	}
}

// A later attempt supersedes a running one: the earlier attempt's steps
// are refused, the later one's taken.
func testSupersession(t *testing.T, c *checker) {
	m := c.queued(t)
	first := c.start(t, m, 1)
	second := c.start(t, m, 2)
	if second != first+1 {
		t.Fatalf("second attempt %d after %d", second, first)
	}
	r := c.get(t, m.TaskID)
	if r.Exec != task.Running || r.Attempt != second || r.Deliveries != 2 {
		t.Fatalf("taken over: exec %s attempt %d deliveries %d", r.Exec, r.Attempt, r.Deliveries)
	}
	_, err := c.lc().Finish(c.ctx, m.TaskID, first, "stale answer")
	wantErr(t, "finish of the superseded attempt", err, task.ErrSuperseded)
	_, err = c.lc().Fail(c.ctx, m.TaskID, first, "stale failure", false)
	wantErr(t, "fail of the superseded attempt", err, task.ErrSuperseded)
	if r, err = c.lc().Finish(c.ctx, m.TaskID, second, "the answer"); err != nil || r.Exec != task.Succeeded {
		t.Fatalf("finish of the later attempt: %v (%v)", err, r)
	}
}

// Cancel ends a task in any unfinished state, frees its conversation and
// is announced; a finished task is not canceled.
func testCancel(t *testing.T, c *checker) {
	queued := c.queued(t)
	running := c.queued(t)
	a := c.start(t, running, 1)
	for _, m := range []task.Message{queued, running} {
		r, err := c.lc().Cancel(c.ctx, m.TaskID, "/stop")
		if err != nil {
			t.Fatal(err)
		}
		if r.Exec != task.Canceled {
			t.Fatalf("canceled: exec %s", r.Exec)
		}
		c.noticed(t, m.TaskID, "cancel")
		if c.s.Locked(bot, m.Chat) {
			t.Fatalf("canceled task %s still holds its conversation", m.TaskID)
		}
	}
	_, err := c.lc().Cancel(c.ctx, queued.TaskID, "again")
	wantErr(t, "second cancel", err, task.ErrFinished)
	_, err = c.lc().Finish(c.ctx, running.TaskID, a, "too late")
	wantErr(t, "finish of a canceled task", err, task.ErrFinished)
}

// Retry queues a finished task again, its delivery reopened for a new
// push, with a new queue message; an unfinished task or a busy
// conversation is refused.
func testRetry(t *testing.T, c *checker) {
	m := c.queued(t)
	_, err := c.lc().Retry(c.ctx, m.TaskID, "operator")
	wantErr(t, "retry of a queued task", err, task.ErrNotFinished)
	a := c.start(t, m, 1)
	if _, err := c.lc().Fail(c.ctx, m.TaskID, a, "broken", false); err != nil {
		t.Fatal(err)
	}
	before := c.get(t, m.TaskID)
	r, err := c.lc().Retry(c.ctx, m.TaskID, "operator")
	if err != nil {
		t.Fatal(err)
	}
	if r.Exec != task.Queued || r.Delivery != task.Pending || r.PushRound != before.PushRound+1 || r.Error != "" {
		t.Fatalf("retried: exec %s delivery %s round %d (was %d) error %q", r.Exec, r.Delivery, r.PushRound, before.PushRound, r.Error)
	}
	c.noticed(t, m.TaskID, "retry")
	if !c.s.Locked(bot, m.Chat) || !c.undelivered(m.TaskID) {
		t.Fatal("a retried task is not queued and undelivered")
	}
	b := c.start(t, m, 1)
	if b != a+1 {
		t.Fatalf("retried attempt %d after %d", b, a)
	}

	busy := c.queued(t) // its conversation holds its queue message while it finishes
	d := c.start(t, busy, 1)
	if _, err := c.lc().Finish(c.ctx, busy.TaskID, d, "answer"); err != nil {
		t.Fatal(err)
	}
	_, err = c.lc().Retry(c.ctx, busy.TaskID, "operator")
	wantErr(t, "retry in a busy conversation", err, task.ErrConversationBusy)
}

// A refusal decided late fails a task never started (created refused
// when it has no record) and leaves one under way alone.
func testRefused(t *testing.T, c *checker) {
	_, m := c.message(t)
	r, err := c.lc().Refused(c.ctx, m, "busy", true)
	if err != nil {
		t.Fatal(err)
	}
	if r.Exec != task.Failed || !r.Busy || r.Error != "busy" {
		t.Fatalf("refused: exec %s busy %v error %q", r.Exec, r.Busy, r.Error)
	}
	c.noticed(t, m.TaskID, "refusal")
	running := c.queued(t)
	c.start(t, running, 1)
	if r, err = c.lc().Refused(c.ctx, running, "busy", true); err != nil {
		t.Fatal(err)
	}
	if r.Exec != task.Running || r.Busy {
		t.Fatalf("refusal of a running task: exec %s busy %v", r.Exec, r.Busy)
	}
	_, m = c.message(t)
	if r, err = c.lc().RefusedSaying(c.ctx, m, "files too large"); err != nil {
		t.Fatal(err)
	}
	if r.Exec != task.Failed || r.Busy || r.Refusal != "files too large" {
		t.Fatalf("refused saying: exec %s busy %v refusal %q", r.Exec, r.Busy, r.Refusal)
	}
	c.noticed(t, m.TaskID, "refusal saying its words")
}

// A finished task's delivery: frames shown make it streaming, the final
// intent is kept, parts pushed only ever grow and are fenced to their
// push, and the delivered ending takes it out of the index; a redeliver
// reopens it for a new push, announced.
func testDeliveryStates(t *testing.T, c *checker) {
	m := c.queued(t)
	a := c.start(t, m, 1)
	if _, err := c.lc().Finish(c.ctx, m.TaskID, a, "the answer"); err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC().Truncate(time.Millisecond)
	r := c.get(t, m.TaskID)
	if w := c.lc().WithShown(r, task.Frame{Hash: "h1", At: at}); w.Delivery != task.Streaming || w.PushedHash != "h1" {
		t.Fatalf("with shown: delivery %s hash %q", w.Delivery, w.PushedHash)
	}
	if c.get(t, m.TaskID).Delivery != task.Pending {
		t.Fatal("WithShown wrote the record")
	}
	r, rev, err := c.lc().ShownFrom(c.ctx, r, anyRev, task.Frame{Hash: "h1", At: at})
	if err != nil {
		t.Fatal(err)
	}
	if r.Delivery != task.Streaming || r.PushedHash != "h1" || !r.PushedAt.Equal(at) || !r.StreamStart.Equal(at) {
		t.Fatalf("shown: delivery %s hash %q at %s start %s", r.Delivery, r.PushedHash, r.PushedAt, r.StreamStart)
	}
	if r, _, err = c.lc().FinalIntentFrom(c.ctx, r, rev); err != nil || !r.FinalPending {
		t.Fatalf("final intent: %v, pending %v", err, r != nil && r.FinalPending)
	}
	from := r
	if r, err = c.lc().PartPushed(c.ctx, from, 2); err != nil || r.PushedParts != 2 {
		t.Fatalf("part pushed: %v (%v)", err, r)
	}
	if r, err = c.lc().PartPushed(c.ctx, from, 1); err != nil || r.PushedParts != 2 {
		t.Fatalf("a late lower count: %v, parts %d", err, r.PushedParts)
	}
	if r, err = c.lc().Delivered(c.ctx, from, "the answer", "", 3); err != nil {
		t.Fatal(err)
	}
	if r.Delivery != task.Delivered || r.FinalPending || r.PushedParts != 3 || r.PushedHash != task.Hash("the answer") {
		t.Fatalf("delivered: delivery %s pending %v parts %d", r.Delivery, r.FinalPending, r.PushedParts)
	}
	if c.undelivered(m.TaskID) {
		t.Fatal("a delivered task is still in the undelivered index")
	}
	if r, err = c.lc().Redeliver(c.ctx, m.TaskID, "operator"); err != nil {
		t.Fatal(err)
	}
	if r.Delivery != task.Pending || r.PushRound != from.PushRound+1 || r.PushedParts != 0 {
		t.Fatalf("redelivered: delivery %s round %d parts %d", r.Delivery, r.PushRound, r.PushedParts)
	}
	c.noticed(t, m.TaskID, "redeliver")
	if !c.undelivered(m.TaskID) {
		t.Fatal("a redelivered task is not in the undelivered index")
	}
	_, err = c.lc().PartPushed(c.ctx, from, 3)
	wantErr(t, "part pushed for the push before the redeliver", err, task.ErrPushSuperseded)
	_, err = c.lc().Delivered(c.ctx, from, "the answer", "", 0)
	wantErr(t, "delivered for the push before the redeliver", err, task.ErrPushSuperseded)
	if r, err = c.lc().Truncate(c.ctx, m.TaskID, "stream closed"); err != nil || r.Delivery != task.Truncated || r.DeliveryReason != "stream closed" {
		t.Fatalf("truncated: %v (%v)", err, r)
	}
}

// Failed sends fail the delivery for good at the last attempt, an answer
// owed too long expires, and either leaves the index; Forget drops an
// entry.
func testDeliveryFailed(t *testing.T, c *checker) {
	m := c.queued(t)
	a := c.start(t, m, 1)
	if _, err := c.lc().Finish(c.ctx, m.TaskID, a, "the answer"); err != nil {
		t.Fatal(err)
	}
	sendErr := errors.New("45009 quota")
	r, err := c.lc().SendFailed(c.ctx, m.TaskID, sendErr, 2)
	if err != nil || r.Delivery != task.Pending || r.PushAttempts != 1 {
		t.Fatalf("first failed send: %v (%v)", err, r)
	}
	if r, err = c.lc().SendFailed(c.ctx, m.TaskID, sendErr, 2); err != nil || r.Delivery != task.DeliveryFailed {
		t.Fatalf("last failed send: %v (%v)", err, r)
	}
	if c.undelivered(m.TaskID) {
		t.Fatal("a failed delivery is still in the undelivered index")
	}

	e := c.queued(t)
	b := c.start(t, e, 1)
	if _, err := c.lc().Finish(c.ctx, e.TaskID, b, "late"); err != nil {
		t.Fatal(err)
	}
	if r, err = c.lc().Expired(c.ctx, e.TaskID, time.Hour); err != nil || r.Delivery != task.DeliveryFailed || !strings.HasPrefix(r.DeliveryReason, task.ExpiredPrefix) {
		t.Fatalf("expired: %v (%v)", err, r)
	}
	if c.undelivered(e.TaskID) {
		t.Fatal("an expired delivery is still in the undelivered index")
	}

	f := c.queued(t)
	if err := c.lc().Forget(c.ctx, bot, f.TaskID); err != nil {
		t.Fatal(err)
	}
	if c.undelivered(f.TaskID) {
		t.Fatal("a forgotten task is still in the undelivered index")
	}
}

// A user's verdict is counted once per feedback_event.
func testFeedback(t *testing.T, c *checker) {
	m := c.queued(t)
	fb := task.Feedback{Kind: "accurate", User: "u"}
	r, err := c.lc().Feedback(c.ctx, bot, m.TaskID, "fb-1", fb)
	if err != nil || r.Feedback == nil || r.Feedback.Count != 1 {
		t.Fatalf("feedback: %v (%v)", err, r)
	}
	_, err = c.lc().Feedback(c.ctx, bot, m.TaskID, "fb-1", fb)
	wantErr(t, "the same feedback_event again", err, task.ErrFeedbackCounted)
	if _, err := c.lc().Feedback(c.ctx, "other", m.TaskID, "fb-2", fb); err == nil {
		t.Fatal("feedback of another bot's task: no error")
	}
}

// A message recorded before its files are taken is receiving until it is
// dispatched; Unreceived removes it then, and only then.
func testReceiving(t *testing.T, c *checker) {
	r, _ := c.message(t)
	until := time.Now().Add(time.Minute)
	got, err := c.lc().Receive(c.ctx, r, until)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Receiving() || !c.undelivered(r.ID) {
		t.Fatalf("received: receiving %v, undelivered %v", got.Receiving(), c.undelivered(r.ID))
	}
	removed, err := c.lc().Unreceived(c.ctx, r.ID)
	if err != nil || !removed {
		t.Fatalf("unreceived: %v, removed %v", err, removed)
	}
	if _, err := c.lc().Get(c.ctx, r.ID); err == nil {
		t.Fatal("an unreceived task's record is still there")
	}
	if c.undelivered(r.ID) {
		t.Fatal("an unreceived task is still in the undelivered index")
	}

	d, _ := c.message(t)
	if _, err := c.lc().Receive(c.ctx, d, until); err != nil {
		t.Fatal(err)
	}
	dispatched := *d
	dispatched.Tier = "queue"
	if _, err := c.lc().Open(c.ctx, &dispatched); err != nil {
		t.Fatal(err)
	}
	if removed, err = c.lc().Unreceived(c.ctx, d.ID); err != nil || removed {
		t.Fatalf("unreceived after dispatch: %v, removed %v", err, removed)
	}
}

// /stop cancels the task holding the conversation and frees it; a
// conversation holding none is left as it is.
func testStop(t *testing.T, c *checker) {
	m := c.queued(t)
	c.start(t, m, 1)
	rel, err := c.lc().Stop(c.ctx, bot, m.Chat, "/stop by the user")
	if err != nil {
		t.Fatal(err)
	}
	if !rel.Removed || rel.Task != m.TaskID || rel.Record != string(task.Canceled) || !rel.Ended() {
		t.Fatalf("stopped: %+v", rel)
	}
	if c.get(t, m.TaskID).Exec != task.Canceled || c.s.Locked(bot, m.Chat) {
		t.Fatal("a stopped task is not canceled, or still holds its conversation")
	}
	c.noticed(t, m.TaskID, "stop")
	if rel, err = c.lc().Stop(c.ctx, bot, m.Chat, "again"); err != nil || rel.Removed {
		t.Fatalf("stop of a free conversation: %v (%+v)", err, rel)
	}
}
