package task_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Cancel works in every unfinished state, frees the conversation, tells
// the worker (an announcement on its subject) and the pusher (a notice).
func TestCancelInEveryState(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	cancels, err := f.env.Conn.SubscribeSync(f.env.Store.Names().CancelSubjects())
	if err != nil {
		t.Fatal(err)
	}
	notices, err := f.env.Conn.SubscribeSync(f.env.Store.Names().NoticeSubject("b"))
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
		if err != nil {
			t.Fatalf("%s's cancel announcement: %v", m.Chat, err)
		}
		if id, _ := f.env.Store.Names().CanceledTask(c.Subject); id != m.TaskID {
			t.Fatalf("cancel announcement on %s, want task %s", c.Subject, m.TaskID)
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
	if err := w2.Final(f.ctx, "second, complete"); err != nil {
		t.Fatal(err)
	}
	// The earlier attempt's last write is fenced off too, in the output
	// bucket (its writer never wrote there).
	if err := w1.Final(f.ctx, "first"); !errors.Is(err, task.ErrSuperseded) {
		t.Fatalf("stale final write: %v, want ErrSuperseded", err)
	}
	r, err = f.lc.Finish(f.ctx, m.TaskID, a2, "second, complete")
	if err != nil || r.Exec != task.Succeeded || r.AnswerHash != task.Hash("second, complete") {
		t.Fatalf("finish: %+v %v", r, err)
	}
	o, _ := task.GetOutput(f.ctx, f.env.Store.Output(), m.TaskID)
	if o == nil || o.Text != "second, complete" || o.Attempt != a2 {
		t.Fatalf("output = %+v", o)
	}
	// Retire drops the attempt's text in progress after its last write.
	w2.Retire(f.ctx)
	if o, err := task.GetOutput(f.ctx, f.env.Store.Progress(), m.TaskID); o != nil || err != nil {
		t.Fatalf("progress after the last write = %+v, %v; want none", o, err)
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
// busy, in the undelivered index for the pusher) or not at all, never a
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
	ids, err := f.env.Store.UndeliveredTasks(f.ctx, "b")
	if err != nil || !slices.Contains(ids, m.TaskID) {
		t.Fatalf("undelivered index %v (%v): the pusher would never send the refusal", ids, err)
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
	w := f.lc.Output(m.TaskID, "b", a)
	w.Write(f.ctx, "answ")
	w.Final(f.ctx, "answer")
	w = f.lc.Output(m.TaskID, "b", a) // a writer that did not see its last write (its node restarted)
	w.Write(f.ctx, "answer")
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
	if o, _ := task.ReadOutput(f.ctx, f.env.Store, m.TaskID, true); o != nil {
		t.Fatalf("old output kept: %+v", o)
	}
	if o, _ := task.ReadOutput(f.ctx, f.env.Store, m.TaskID, false); o != nil {
		t.Fatalf("old output kept: %+v", o)
	}
	a2, _, err := f.lc.Start(f.ctx, m, "queue", 1)
	if err != nil || a2 != a+1 {
		t.Fatalf("start after retry: %d %v", a2, err)
	}
}
