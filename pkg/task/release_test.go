package task_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// publishOnly queues a task for chat whose record never landed (the
// leader's write failed): the queue message and nothing else.
func (f *fixture) publishOnly(msgid, chat string) task.Message {
	f.t.Helper()
	r := task.New("b", msgid, time.Now())
	r.Chat, r.ChatType, r.User, r.Question = chat, "single", chat, "q "+msgid
	m := task.MessageOf(r)
	raw, _ := json.Marshal(m)
	if _, err := f.env.Store.PublishTask(f.ctx, "b", chat, msgid, raw); err != nil {
		f.t.Fatal(err)
	}
	return m
}

// olderThan waits until chat's queue message is older than d on the
// server's clock (the sweep's measure of its age).
func (f *fixture) olderThan(chat string, d time.Duration) {
	f.t.Helper()
	testwait.Eventually(f.t, time.Minute, chat+"'s queue message older than "+d.String(), func() bool {
		msg, err := f.env.Store.ConversationTask(f.ctx, "b", chat)
		if err != nil || msg == nil {
			return false
		}
		q, err := f.env.Store.ListQueue(f.ctx, "b")
		return err == nil && q.ServerTime.Sub(msg.Time) > d
	})
}

// A queue message whose record never landed, older than the deadline, is
// given up by the sweep: the record is made from the message and failed
// (the user is told), and the conversation is freed. A younger one is
// left to the worker that opens it. The young message is swept with a
// deadline of an hour: with the second, a stall of over a second between
// the publish and the sweep (a loaded machine) made it old. The exact
// times (just before, at, just after the deadline; on the server's clock)
// are TestDecideQueued's.
func TestSweepGivesUpAQueueMessageWithoutRecordPastTheDeadline(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	const deadline = time.Second
	m := f.publishOnly("m1", "alice")
	if res, err := f.lc.Sweep(f.ctx, "b", time.Hour, 0); err != nil || res.Deadline != 0 || !f.locked("alice") {
		t.Fatalf("young message: %+v %v, locked %v", res, err, f.locked("alice"))
	}
	f.olderThan("alice", deadline)
	res, err := f.lc.Sweep(f.ctx, "b", deadline, 0)
	if err != nil || res.Deadline != 1 || f.locked("alice") {
		t.Fatalf("sweep: %+v %v, locked %v", res, err, f.locked("alice"))
	}
	if r := f.record(m.TaskID); r.Exec != task.Failed || !strings.Contains(r.Error, "deadline") || r.Question != m.Question {
		t.Fatalf("record: %s %q %q", r.Exec, r.Error, r.Question)
	}
}

// faultFixture is a fixture whose lifecycle reaches NATS as the user a
// BucketFault can fail the tasks bucket for; f.env.Store is the probe's
// view (never failed), for the test's own reads.
type faultFixture struct {
	*fixture
	fault *testenv.BucketFault
	lc    *task.Lifecycle // botctl's: the one the fault applies to
	store *jetstream.Store
}

func newFaultFixture(t *testing.T, opts jetstream.Options) *faultFixture {
	fault := testenv.StartBucketFault(t)
	_, store := fault.Store(t, fault.URL, opts)
	pnc, probe := fault.Store(t, fault.ProbeURL, opts)
	env := &testenv.JetStream{Conn: pnc, JS: probe.JetStream(), Store: probe}
	f := &fixture{t: t, env: env, lc: task.NewLifecycle(probe, "probe", zerolog.Nop()), ctx: context.Background()}
	return &faultFixture{fixture: f, fault: fault, lc: task.NewLifecycle(store, "n1", zerolog.Nop()), store: store}
}

// While the tasks bucket fails, the sweep frees every conversation held
// past the deadline, whether its task has a record or none: it cannot
// read or write one, so it goes by the queue message's age (on the
// server's clock), and owes the endings. Once the bucket answers, the
// next sweep writes them: each record failed, each user told.
func TestSweepFreesConversationsWhileTheTasksBucketFails(t *testing.T) {
	f := newFaultFixture(t, jetstream.Options{})
	const deadline = time.Second
	recorded := f.queue("m1", "alice")
	unrecorded := f.publishOnly("m2", "bob")
	f.fault.Fail(t, f.store.Names().TasksBucket)
	f.olderThan("alice", deadline)
	f.olderThan("bob", deadline)

	res, err := f.lc.Sweep(f.ctx, "b", deadline, 0)
	if err == nil || res.Abandoned != 2 || f.locked("alice") || f.locked("bob") {
		t.Fatalf("sweep while the tasks bucket fails: %+v %v, alice locked %v, bob locked %v", res, err, f.locked("alice"), f.locked("bob"))
	}
	if n := f.lc.Owed(); n != 2 {
		t.Fatalf("owed endings: %d, want 2", n)
	}

	f.fault.Heal(t)
	res, err = f.lc.Sweep(f.ctx, "b", deadline, 0)
	if err != nil || res.Owed != 2 || f.lc.Owed() != 0 {
		t.Fatalf("sweep once the bucket answers: %+v %v, still owed %d", res, err, f.lc.Owed())
	}
	for _, m := range []task.Message{recorded, unrecorded} {
		if r := f.record(m.TaskID); r.Exec != task.Failed || !strings.Contains(r.Error, "deadline") {
			t.Fatalf("%s: %s %q", m.Chat, r.Exec, r.Error)
		}
	}
}

// A refusal that cannot be written (the spool's queue refused a task
// while the tasks bucket fails, its record not there yet) is owed and
// written once the bucket answers: the record says refused (busy), and
// the user is told.
func TestRefusalOwedWhileTheTasksBucketFails(t *testing.T) {
	f := newFaultFixture(t, jetstream.Options{})
	r := task.New("b", "m1", time.Now())
	r.Chat, r.ChatType, r.User, r.Question = "alice", "single", "alice", "q m1"
	m := task.MessageOf(r)
	f.fault.Fail(t, f.store.Names().TasksBucket)
	ctx, cancel := context.WithTimeout(f.ctx, 3*time.Second)
	defer cancel()
	if _, err := f.lc.Refused(ctx, m, "busy: refused on its way out of the spool", true); err == nil {
		t.Fatal("a refusal written while the tasks bucket fails")
	}
	if n := f.lc.Owed(); n != 1 {
		t.Fatalf("owed endings: %d, want the refusal", n)
	}
	f.fault.Heal(t)
	res, err := f.lc.Sweep(f.ctx, "b", time.Hour, 0)
	if err != nil || res.Owed != 1 || f.lc.Owed() != 0 {
		t.Fatalf("sweep once the bucket answers: %+v %v, still owed %d", res, err, f.lc.Owed())
	}
	if got := f.record(m.TaskID); got.Exec != task.Failed || !got.Busy || !strings.Contains(got.Error, "spool") {
		t.Fatalf("record: %s busy %v %q", got.Exec, got.Busy, got.Error)
	}
}

// /stop and `botctl tasks release` find the conversation's task by its
// queue message: a task without a record is opened from it and ended,
// and while the tasks bucket fails the conversation is freed all the
// same, its ending owed and written once the bucket answers.
func TestStopAndReleaseWithoutARecord(t *testing.T) {
	f := newFaultFixture(t, jetstream.Options{})
	stopped := f.publishOnly("m1", "alice")
	rel, err := f.lc.Stop(f.ctx, "b", "alice", "/stop by the user")
	if err != nil || !rel.Ended() || rel.Record != "opened and canceled" || f.locked("alice") {
		t.Fatalf("stop: %+v %v, locked %v", rel, err, f.locked("alice"))
	}
	if r := f.record(stopped.TaskID); r.Exec != task.Canceled {
		t.Fatalf("stopped task: %s", r.Exec)
	}
	if rel, err := f.lc.Stop(f.ctx, "b", "alice", "again"); err != nil || rel.Removed || rel.Ended() {
		t.Fatalf("stop of a free conversation: %+v %v", rel, err)
	}

	released := f.queue("m2", "bob")
	notRecorded := f.publishOnly("m3", "carol")
	f.fault.Fail(t, f.store.Names().TasksBucket)
	rel, err = f.lc.Release(f.ctx, "b", "bob", "operator release")
	if err != nil || !rel.Ended() || rel.Record != "not written" || rel.Error == "" || f.locked("bob") {
		t.Fatalf("release while the bucket fails: %+v %v, locked %v", rel, err, f.locked("bob"))
	}
	rel, err = f.lc.Stop(f.ctx, "b", "carol", "/stop by the user")
	if err != nil || !rel.Ended() || f.locked("carol") {
		t.Fatalf("stop while the bucket fails: %+v %v, locked %v", rel, err, f.locked("carol"))
	}

	f.fault.Heal(t)
	if res, err := f.lc.Sweep(f.ctx, "b", time.Hour, 0); err != nil || res.Owed != 2 {
		t.Fatalf("sweep once the bucket answers: %+v %v", res, err)
	}
	if r := f.record(released.TaskID); r.Exec != task.Failed || r.Error != "operator release" {
		t.Fatalf("released task: %s %q", r.Exec, r.Error)
	}
	if r := f.record(notRecorded.TaskID); r.Exec != task.Canceled {
		t.Fatalf("stopped task: %s", r.Exec)
	}
}

// A task whose queue message reaches its last delivery while the tasks
// bucket fails (its record never landed: every Start failed) frees its
// conversation at once: the advisory's work is not dropped because the
// record cannot be written; the ending is owed and written, and the user
// told, once the bucket answers.
func TestMaxDeliveriesWhileTheTasksBucketFails(t *testing.T) {
	f := newFaultFixture(t, jetstream.Options{TaskMaxDeliver: 2, TaskAckWait: time.Second})
	f.fault.Fail(t, f.store.Names().TasksBucket)
	m := f.publishOnly("m1", "alice")
	ctx, cancel := context.WithCancel(f.ctx)
	nc := f.store.JetStream().Conn()
	subs := nc.NumSubscriptions()
	watched := make(chan struct{})
	go func() { defer close(watched); f.lc.WatchMaxDeliveries(ctx) }()
	defer func() { cancel(); <-watched }()
	testwait.Eventually(t, time.Minute, "the advisories subscribed", func() bool { return nc.NumSubscriptions() > subs })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// Every delivery handed back (the worker's Start failed); the server
	// announces the last one when a worker pulls again.
	testwait.Eventually(t, time.Minute, "the conversation freed", func() bool {
		batch, err := f.store.Workers().Fetch(1, natsjs.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range batch.Messages() {
			msg.Nak()
		}
		return !f.locked("alice")
	})
	testwait.Eventually(t, time.Minute, "the ending owed", func() bool { return f.lc.Owed() == 1 })

	f.fault.Heal(t)
	testwait.Eventually(t, time.Minute, "the owed ending written", func() bool {
		r, err := f.fixture.lc.Get(f.ctx, m.TaskID)
		return err == nil && r.Exec == task.Failed && strings.Contains(r.Error, "delivered 2 times")
	})
}
