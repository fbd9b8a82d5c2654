package task_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// exhaust hands back every delivery of the queue until the server
// announces the last one (a worker pulling again after it), and
// WatchMaxDeliveries (running on lc) has acted: done reports when.
func exhaust(t *testing.T, f *fixture, lc *task.Lifecycle, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(f.ctx)
	nc := f.env.Store.JetStream().Conn()
	subs := nc.NumSubscriptions()
	watched := make(chan struct{})
	go func() { defer close(watched); lc.WatchMaxDeliveries(ctx) }()
	defer func() { cancel(); <-watched }()
	testwait.Eventually(t, time.Minute, "the advisories subscribed", func() bool { return nc.NumSubscriptions() > subs })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "the last delivery announced and acted on", func() bool {
		if done() {
			return true
		}
		batch, err := f.env.Store.Workers().Fetch(1, natsjs.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range batch.Messages() {
			msg.Nak()
		}
		return done()
	})
}

// A task whose deliveries ran out while its current attempt had only just
// begun (the deliveries went to hand-offs: nodes stopping, a NATS server
// handing the message out again) is requeued with fresh deliveries, not
// given up: its record stays running and its conversation taken, and
// the copy says it was requeued. At most task.MaxRequeues times: then it
// is given up as any task whose deliveries ran out.
func TestLiveAttemptPastItsLastDeliveryIsRequeued(t *testing.T) {
	f := newFixture(t, jetstream.Options{TaskMaxDeliver: 2, TaskAckWait: 20 * time.Second})
	m := f.queue("m1", "alice")
	if _, _, err := f.lc.Start(f.ctx, m, "queue", 1); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= task.MaxRequeues; i++ {
		exhaust(t, f, f.lc, func() bool {
			msg, err := f.env.Store.ConversationTask(f.ctx, "b", "alice")
			return err == nil && msg != nil && jetstream.Requeues(msg.Header) == i
		})
		if r := f.record(m.TaskID); r.Exec != task.Running {
			t.Fatalf("requeue %d: record %s %q, want still running", i, r.Exec, r.Error)
		}
	}
	exhaust(t, f, f.lc, func() bool { return !f.locked("alice") })
	if r := f.record(m.TaskID); r.Exec != task.Failed || !strings.Contains(r.Error, "delivered 2 times") {
		t.Fatalf("past %d requeues: record %s %q, want given up", task.MaxRequeues, r.Exec, r.Error)
	}
}

// A task whose current attempt began longer ago than half the ack wait
// (its deliveries went to attempts that died, one ack wait each) is given
// up when its deliveries run out, as before.
func TestDeadAttemptPastItsLastDeliveryIsGivenUp(t *testing.T) {
	f := newFixture(t, jetstream.Options{TaskMaxDeliver: 2, TaskAckWait: 20 * time.Second})
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	lc := f.lc.WithClock(func() time.Time { return time.Unix(0, now.Load()) })
	m := f.queue("m1", "alice")
	if _, _, err := lc.Start(f.ctx, m, "queue", 1); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(11 * time.Second))
	exhaust(t, f, lc, func() bool { return !f.locked("alice") })
	if r := f.record(m.TaskID); r.Exec != task.Failed || !strings.Contains(r.Error, "delivered 2 times") {
		t.Fatalf("record %s %q, want given up", r.Exec, r.Error)
	}
}
