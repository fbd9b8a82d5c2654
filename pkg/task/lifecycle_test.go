package task_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/testenv"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

type fixture struct {
	t   *testing.T
	env *testenv.JetStream
	lc  *task.Lifecycle
	ctx context.Context
}

func newFixture(t *testing.T, opts jetstream.Options) *fixture {
	env := testenv.StartJetStream(t, opts)
	return &fixture{t: t, env: env, lc: task.NewLifecycle(env.Store, "n1", zerolog.Nop()), ctx: context.Background()}
}

// queue publishes a task for chat and opens its record, as the leader does.
func (f *fixture) queue(msgid, chat string) task.Message {
	f.t.Helper()
	r := task.New("b", msgid, time.Now())
	r.Chat, r.ChatType, r.User, r.Question = chat, "single", chat, "q "+msgid
	m := task.MessageOf(r)
	raw, _ := json.Marshal(m)
	if _, err := f.env.Store.PublishTask(f.ctx, "b", chat, msgid, raw); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.lc.Open(f.ctx, r); err != nil {
		f.t.Fatal(err)
	}
	return m
}

func (f *fixture) record(id string) *task.Record {
	f.t.Helper()
	r, err := f.lc.Get(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// locked reports whether chat's conversation has a message in the queue.
func (f *fixture) locked(chat string) bool {
	f.t.Helper()
	msg, err := f.env.Store.ConversationTask(f.ctx, "b", chat)
	if err != nil {
		f.t.Fatal(err)
	}
	return msg != nil
}

// Cancel works in every unfinished state, frees the conversation, tells
// the worker (an announcement on its subject) and the pusher (a notice).
func TestCancelInEveryState(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	cancels, err := f.env.Conn.SubscribeSync(task.CancelSubjects)
	if err != nil {
		t.Fatal(err)
	}
	notices, err := f.env.Conn.SubscribeSync(task.NoticeSubject("b"))
	if err != nil {
		t.Fatal(err)
	}
	f.env.Conn.Flush()

	queued := f.queue("m1", "alice")
	running := f.queue("m2", "bob")
	if _, _, err := f.lc.Start(f.ctx, running, "queue", 1); err != nil {
		t.Fatal(err)
	}
	// Stuck: running, its worker gone, its deliveries spent: nobody holds it.
	stuck := f.queue("m3", "carol")
	if _, _, err := f.lc.Start(f.ctx, stuck, "queue", 5); err != nil {
		t.Fatal(err)
	}
	for _, m := range []task.Message{queued, running, stuck} {
		r, err := f.lc.Cancel(f.ctx, m.TaskID, "operator cancel")
		if err != nil {
			t.Fatalf("cancel %s: %v", m.Chat, err)
		}
		if r.Exec != task.Canceled || f.locked(m.Chat) {
			t.Fatalf("%s after cancel: exec %s, locked %v", m.Chat, r.Exec, f.locked(m.Chat))
		}
		c, err := cancels.NextMsg(5 * time.Second)
		if id, _ := task.CanceledTask(c.Subject); err != nil || id != m.TaskID {
			t.Fatalf("cancel announcement: %v %v", c, err)
		}
		n, err := notices.NextMsg(5 * time.Second)
		if err != nil || string(n.Data) != m.TaskID {
			t.Fatalf("notice: %v %v", n, err)
		}
	}
	if _, err := f.lc.Cancel(f.ctx, queued.TaskID, "again"); !errors.Is(err, task.ErrFinished) {
		t.Fatalf("second cancel: %v, want ErrFinished", err)
	}
}

// Cancel frees only the conversation's message of that task, never a
// newer task's.
func TestCancelLeavesAnotherTasksMessage(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	old := f.queue("m1", "alice")
	// m1's message is gone (acked), and m2 now holds the conversation.
	msg, _ := f.env.Store.ConversationTask(f.ctx, "b", "alice")
	if err := f.env.Store.RemoveTask(f.ctx, msg.Sequence); err != nil {
		t.Fatal(err)
	}
	f.queue("m2", "alice")
	if _, err := f.lc.Cancel(f.ctx, old.TaskID, "late cancel"); err != nil {
		t.Fatal(err)
	}
	if !f.locked("alice") {
		t.Fatal("canceling an old task removed the newer task's message")
	}
}

// Attempts are fenced: once a later attempt started, the earlier one can
// neither finish, fail, nor write output.
func TestAttemptFencing(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	m := f.queue("m1", "alice")
	a1, _, err := f.lc.Start(f.ctx, m, "local", 0)
	if err != nil {
		t.Fatal(err)
	}
	w1 := f.lc.Output(m.TaskID, "b", a1)
	if err := w1.Write(f.ctx, "first attempt's text"); err != nil {
		t.Fatal(err)
	}
	a2, r, err := f.lc.Start(f.ctx, m, "fixed", 0)
	if err != nil || a2 != a1+1 || !strings.Contains(r.Transitions[len(r.Transitions)-1].Reason, "superseding attempt 1") {
		t.Fatalf("second start: attempt %d, %v", a2, err)
	}
	w2 := f.lc.Output(m.TaskID, "b", a2)
	if err := w2.Write(f.ctx, "second"); err != nil {
		t.Fatal(err)
	}
	if err := w1.Write(f.ctx, "first attempt's text, more"); !errors.Is(err, task.ErrSuperseded) {
		t.Fatalf("stale write: %v, want ErrSuperseded", err)
	}
	if _, err := f.lc.Finish(f.ctx, m.TaskID, a1, "first"); !errors.Is(err, task.ErrSuperseded) {
		t.Fatalf("stale finish: %v", err)
	}
	if _, err := f.lc.Fail(f.ctx, m.TaskID, a1, "boom", false); !errors.Is(err, task.ErrSuperseded) {
		t.Fatalf("stale fail: %v", err)
	}
	if err := w2.Write(f.ctx, "second, complete"); err != nil {
		t.Fatal(err)
	}
	r, err = f.lc.Finish(f.ctx, m.TaskID, a2, "second, complete")
	if err != nil || r.Exec != task.Succeeded || r.AnswerHash != task.Hash("second, complete") {
		t.Fatalf("finish: %+v %v", r, err)
	}
	o, _ := task.GetOutput(f.ctx, f.env.Store.Output(), m.TaskID)
	if o.Text != "second, complete" || o.Attempt != a2 {
		t.Fatalf("output = %+v", o)
	}
	if _, _, err := f.lc.Start(f.ctx, m, "queue", 2); !errors.Is(err, task.ErrFinished) {
		t.Fatalf("start of a finished task: %v", err)
	}
}

// A queue delivery does not take over an attempt running off the queue
// while it shows signs of life (the delivery is the copy that holds the
// conversation: ErrRunningOffQueue, nothing changed); once it has been
// silent past the off-queue silence, it does.
func TestQueueDeliveryLeavesALiveAttemptOffQueue(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	m := f.queue("m1", "alice")
	a1, _, err := f.lc.Start(f.ctx, m, "local", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, r, err := f.lc.Start(f.ctx, m, "queue", 1); !errors.Is(err, task.ErrRunningOffQueue) || r.Attempt != a1 {
		t.Fatalf("queue delivery beside a live local attempt: %v (record at attempt %d), want ErrRunningOffQueue", err, r.Attempt)
	}
	if r, alive, err := f.lc.OffQueue(f.ctx, m.TaskID); err != nil || !alive || r.Exec != task.Running {
		t.Fatalf("OffQueue: alive %v, %+v, %v", alive, r, err)
	}
	// Output written an hour ago is no sign of life now.
	later := f.lc.WithClock(func() time.Time { return time.Now().Add(time.Hour) })
	if _, alive, _ := later.OffQueue(f.ctx, m.TaskID); alive {
		t.Fatal("an attempt silent for an hour counts as alive")
	}
	a2, r, err := later.Start(f.ctx, m, "queue", 2)
	if err != nil || a2 != a1+1 || r.Deliveries != 2 {
		t.Fatalf("queue delivery after the silence: attempt %d, %v", a2, err)
	}
	// A queue attempt is no attempt off the queue: the next delivery
	// (after an ack wait) takes it over as before.
	if a3, _, err := f.lc.Start(f.ctx, m, "queue", 3); err != nil || a3 != a2+1 {
		t.Fatalf("redelivery over a queue attempt: attempt %d, %v", a3, err)
	}
}

// A retryable failure puts the task back to queued (nobody runs it); a
// final one fails it and frees the conversation.
func TestFailRetryAndFinal(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	m := f.queue("m1", "alice")
	a, _, _ := f.lc.Start(f.ctx, m, "queue", 1)
	r, err := f.lc.Fail(f.ctx, m.TaskID, a, "backend down", true)
	if err != nil || r.Exec != task.Queued || !f.locked("alice") {
		t.Fatalf("retryable failure: %s %v locked %v", r.Exec, err, f.locked("alice"))
	}
	a, _, _ = f.lc.Start(f.ctx, m, "queue", 2)
	r, err = f.lc.Fail(f.ctx, m.TaskID, a, "refused", false)
	if err != nil || r.Exec != task.Failed || r.Error != "refused" || f.locked("alice") {
		t.Fatalf("final failure: %s %q %v locked %v", r.Exec, r.Error, err, f.locked("alice"))
	}
}

// The sweep removes the queue message of a finished task (an ack that was
// lost) and gives up tasks past the execution deadline, on the queue or
// off it.
func TestSweep(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	clock := time.Now()
	lc := f.lc.WithClock(func() time.Time { return clock })

	done := f.queue("m1", "alice")
	a, _, _ := lc.Start(f.ctx, done, "queue", 1)
	lc.Output(done.TaskID, "b", a).Write(f.ctx, "answer")
	if _, err := lc.Finish(f.ctx, done.TaskID, a, "answer"); err != nil {
		t.Fatal(err)
	}
	// The worker's ack was lost: the message stays.
	stuck := f.queue("m2", "bob")
	lc.Start(f.ctx, stuck, "queue", 5)
	offQueue := task.New("b", "m3", clock)
	offQueue.Chat = "carol"
	lc.Open(f.ctx, offQueue)
	lc.Start(f.ctx, task.MessageOf(offQueue), "local", 0)

	res, err := lc.Sweep(f.ctx, "b", time.Hour, time.Minute)
	if err != nil || res.Released != 0 || res.Deadline != 0 {
		t.Fatalf("early sweep: %+v %v", res, err)
	}
	clock = clock.Add(2 * time.Hour)
	// The queue message's own time is the server's: the grace counts
	// from the record then.
	res, err = lc.Sweep(f.ctx, "b", time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Released != 1 || res.Deadline != 2 || f.locked("alice") || f.locked("bob") {
		t.Fatalf("sweep: %+v, alice locked %v, bob locked %v", res, f.locked("alice"), f.locked("bob"))
	}
	for _, id := range []string{stuck.TaskID, offQueue.ID} {
		if r := f.record(id); r.Exec != task.Failed || !strings.Contains(r.Error, "deadline") {
			t.Fatalf("%s: %s %q", id, r.Exec, r.Error)
		}
	}
	if r := f.record(done.TaskID); r.Exec != task.Succeeded {
		t.Fatalf("the sweep changed a finished task: %s", r.Exec)
	}
}

// A spooled task refused on forwarding never fails a task under way.
func TestRefusedSparesRunningTask(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	m := f.queue("m1", "alice")
	f.lc.Start(f.ctx, m, "local", 0)
	r, err := f.lc.Refused(f.ctx, m, "busy", true)
	if err != nil || r.Exec != task.Running {
		t.Fatalf("refused a running task: %s %v", r.Exec, err)
	}
	m2 := task.MessageOf(task.New("b", "m2", time.Now()))
	if r, err := f.lc.Refused(f.ctx, m2, "busy", true); err != nil || r.Exec != task.Failed {
		t.Fatalf("queued spooled task: %s %v", r.Exec, err)
	}
}

// A refusal of a task with no record is one write: stored whole (failed,
// busy, in the pending index for the pusher) or not at all, never a
// record left queued with no queue message.
func TestRefusedFreshTaskIsOneWrite(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	m := task.MessageOf(task.New("b", "m3", time.Now()))
	writes := func() uint64 { // the task bucket's last sequence: one per write
		st, err := f.env.Store.Tasks().Status(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.(*natsjs.KeyValueBucketStatus).StreamInfo().State.LastSeq
	}
	before := writes()
	if _, err := f.lc.Refused(f.ctx, m, "busy", true); err != nil {
		t.Fatal(err)
	}
	if n := writes() - before; n != 1 {
		t.Fatalf("the refusal took %d writes of the record, want 1", n)
	}
	if r := f.record(m.TaskID); r.Exec != task.Failed || !r.Busy || r.Delivery.Finished() {
		t.Fatalf("record: exec %s busy %v delivery %s", r.Exec, r.Busy, r.Delivery)
	}
	ids, err := f.env.Store.PendingTasks(f.ctx, "b")
	if err != nil || !slices.Contains(ids, m.TaskID) {
		t.Fatalf("pending index %v (%v): the pusher would never send the refusal", ids, err)
	}
}

// Retry runs a finished task again under a new attempt (the old output
// dropped), and Redeliver reopens a finished task's delivery; neither
// applies to an unfinished task.
func TestRetryAndRedeliver(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	m := f.queue("m1", "alice")
	if _, err := f.lc.Retry(f.ctx, m.TaskID, "retry"); !errors.Is(err, task.ErrNotFinished) {
		t.Fatalf("retry of a queued task: %v", err)
	}
	a, _, _ := f.lc.Start(f.ctx, m, "queue", 1)
	f.lc.Output(m.TaskID, "b", a).Write(f.ctx, "answer")
	f.lc.Finish(f.ctx, m.TaskID, a, "answer")
	if _, err := f.lc.Retry(f.ctx, m.TaskID, "retry"); !errors.Is(err, task.ErrConversationBusy) {
		t.Fatalf("retry while its message is still queued: %v", err)
	}
	msg, _ := f.env.Store.ConversationTask(f.ctx, "b", "alice")
	f.env.Store.RemoveTask(f.ctx, msg.Sequence) // the worker's ack

	r, err := f.lc.Redeliver(f.ctx, m.TaskID, "redeliver")
	if err != nil || r.Delivery != task.Pending || r.ReqID != "" {
		t.Fatalf("redeliver: %+v %v", r, err)
	}
	r, err = f.lc.Retry(f.ctx, m.TaskID, "retry")
	if err != nil || r.Exec != task.Queued || !f.locked("alice") || r.AnswerHash != "" {
		t.Fatalf("retry: %+v %v", r, err)
	}
	if o, _ := task.GetOutput(f.ctx, f.env.Store.Output(), m.TaskID); o != nil {
		t.Fatalf("old output kept: %+v", o)
	}
	a2, _, err := f.lc.Start(f.ctx, m, "queue", 1)
	if err != nil || a2 != a+1 {
		t.Fatalf("start after retry: %d %v", a2, err)
	}
}

// The MAX_DELIVERIES advisory subject is the server's.
func TestMaxDeliveriesSubject(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	if got := f.env.Store.MaxDeliveriesSubject(); got != "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.BOTCTL_TASKS.workers" {
		t.Fatalf("subject = %s", got)
	}
}

// ShownFrom writes on top of the record the caller read when nobody wrote
// it since, and starts over from a fresh read when somebody did: the other
// writer's change survives, and the caller's copy is never changed.
func TestShownFrom(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	m := f.queue("m1", "u1")
	at := time.Now()

	r, rev, err := task.Get(f.ctx, f.env.Store.Tasks(), m.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	got, next, err := f.lc.ShownFrom(f.ctx, r, rev, "h1", at)
	if err != nil {
		t.Fatal(err)
	}
	if _, stored, err := task.Get(f.ctx, f.env.Store.Tasks(), m.TaskID); err != nil || stored != next || next == rev {
		t.Fatalf("ShownFrom returned revision %d; stored %d (%v), read at %d", next, stored, err, rev)
	}
	if got.PushedHash != "h1" || got.Delivery != task.Streaming || r.PushedHash != "" || r.Delivery != task.Pending {
		t.Fatalf("after ShownFrom: got %q %s, the caller's copy %q %s", got.PushedHash, got.Delivery, r.PushedHash, r.Delivery)
	}
	if stored := f.record(m.TaskID); stored.PushedHash != "h1" || len(stored.RecentSends) != 1 {
		t.Fatalf("stored: pushed %q, recent sends %d", stored.PushedHash, len(stored.RecentSends))
	}

	// A stale revision: the worker wrote meanwhile (here: the pusher's own
	// first write); the frame is recorded on top of it, nothing is lost.
	if _, _, err := f.lc.ShownFrom(f.ctx, r, rev, "h2", at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	stored := f.record(m.TaskID)
	if stored.PushedHash != "h2" || len(stored.RecentSends) != 2 || stored.Delivery != task.Streaming {
		t.Fatalf("after a stale ShownFrom: pushed %q, recent sends %d, delivery %s", stored.PushedHash, len(stored.RecentSends), stored.Delivery)
	}
	if _, _, err := f.lc.ShownFrom(f.ctx, nil, 0, "h3", at); err == nil {
		t.Fatal("ShownFrom with no record read: no error")
	}
}

// The final frame's intent and its delivery, chained from the pusher's
// read: the revision FinalIntentFrom returns is the record's after its
// write (DeliveredFrom needs no read), and a stale revision (someone wrote
// meanwhile) is read again, not lost.
func TestFinalIntentFromThenDeliveredFrom(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	m := f.queue("m1", "u1")
	r, rev, err := task.Get(f.ctx, f.env.Store.Tasks(), m.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	ir, irev, err := f.lc.FinalIntentFrom(f.ctx, r, rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, now, _ := task.Get(f.ctx, f.env.Store.Tasks(), m.TaskID); !ir.FinalPending || r.FinalPending || irev != now || irev <= rev {
		t.Fatalf("after FinalIntentFrom: pending %v (caller's copy %v), revision %d, stored %d, read at %d", ir.FinalPending, r.FinalPending, irev, now, rev)
	}
	// Again from the same (now stale) read: nothing changes, no error.
	if again, arev, err := f.lc.FinalIntentFrom(f.ctx, r, rev); err != nil || !again.FinalPending || arev != irev {
		t.Fatalf("stale FinalIntentFrom: %+v rev %d (want %d) %v", again, arev, irev, err)
	}
	got, err := f.lc.DeliveredFrom(f.ctx, ir, irev, "the answer", "final frame acked", 0)
	if err != nil {
		t.Fatal(err)
	}
	stored := f.record(m.TaskID)
	if got.Delivery != task.Delivered || stored.Delivery != task.Delivered || stored.FinalPending || stored.PushedHash != task.Hash("the answer") {
		t.Fatalf("after DeliveredFrom: delivery %s, stored %s, final pending %v", got.Delivery, stored.Delivery, stored.FinalPending)
	}
	if ids, err := f.env.Store.PendingTasks(f.ctx, "b"); err != nil || slices.Contains(ids, m.TaskID) {
		t.Fatalf("still in the pending index: %v %v", ids, err)
	}
}

// The notice of a finished answer carries the record as written and its
// revision, so the pusher needs no read; its body stays the task id (what
// every pusher reads). A notice whose record does not decode or names
// another task carries none.
func TestFinishNoticeCarriesTheRecord(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	notices, err := f.env.Conn.SubscribeSync(task.NoticeSubject("b"))
	if err != nil {
		t.Fatal(err)
	}
	f.env.Conn.Flush()
	m := f.queue("m1", "alice")
	attempt, _, err := f.lc.Start(f.ctx, m, "queue", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.lc.Finish(f.ctx, m.TaskID, attempt, "the answer"); err != nil {
		t.Fatal(err)
	}
	n, err := notices.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	id, rec, rev := task.NoticeOf(n)
	_, stored, err := task.Get(f.ctx, f.env.Store.Tasks(), m.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if string(n.Data) != m.TaskID || id != m.TaskID || rec == nil || rec.Exec != task.Succeeded || rec.AnswerHash != task.Hash("the answer") || rev != stored {
		t.Fatalf("notice: body %q, id %q, record %+v at %d; stored at %d", n.Data, id, rec, rev, stored)
	}

	// A cancel's notice carries no record: the pusher reads it.
	q := f.queue("m2", "bob")
	if _, err := f.lc.Cancel(f.ctx, q.TaskID, "stop"); err != nil {
		t.Fatal(err)
	}
	n, err = notices.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if id, rec, rev := task.NoticeOf(n); id != q.TaskID || rec != nil || rev != 0 {
		t.Fatalf("cancel notice: %q %+v %d", id, rec, rev)
	}

	// Headers that do not hold: no record.
	bad := task.NoticeMsg(&task.Record{ID: "t1", Bot: "b"}, 7)
	bad.Data = []byte("t2") // the record names another task
	if _, rec, _ := task.NoticeOf(bad); rec != nil {
		t.Fatal("a record of another task was taken")
	}
	bad = task.NoticeMsg(&task.Record{ID: "t1", Bot: "b"}, 7)
	bad.Header.Set("Botctl-Record", "not base64!")
	if id, rec, _ := task.NoticeOf(bad); id != "t1" || rec != nil {
		t.Fatal("a corrupt record was taken")
	}
	bad = task.NoticeMsg(&task.Record{ID: "t1", Bot: "b"}, 7)
	bad.Header.Set("Botctl-Rev", "x")
	if _, rec, _ := task.NoticeOf(bad); rec != nil {
		t.Fatal("a record without a revision was taken")
	}
	if id, rec, rev := task.NoticeOf(task.NoticeMsg(&task.Record{ID: "t1", Bot: "b"}, 7)); id != "t1" || rec == nil || rev != 7 {
		t.Fatalf("good notice: %q %v %d", id, rec, rev)
	}
}
