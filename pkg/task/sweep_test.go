package task_test

import (
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/dataplane"
	"github.com/botctl/botctl/pkg/task"
)

// The sweep removes the queue message of a finished task (an ack that was
// lost) and gives up tasks past the execution deadline, on the queue or
// off it.
func TestSweep(t *testing.T) {
	f := newFixture(t, dataplane.Options{})
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

// The MAX_DELIVERIES advisory subject is the server's.
func TestMaxDeliveriesSubject(t *testing.T) {
	f := newFixture(t, dataplane.Options{})
	if got := f.env.Store.MaxDeliveriesSubject(); got != "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.BOTCTL_TASKS.workers" {
		t.Fatalf("subject = %s", got)
	}
}
