package task_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
)

// The sweep removes the queue message of a finished task (an ack that was
// lost) and gives up tasks past the execution deadline, on the queue or
// off it. The exact times of these rules are TestDecideQueued's and
// TestDecideUndelivered's.
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

// The MAX_DELIVERIES advisory subject is the server's.
func TestMaxDeliveriesSubject(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	if got := f.env.Store.MaxDeliveriesSubject(); got != "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.BOTCTL_TASKS.workers" {
		t.Fatalf("subject = %s", got)
	}
}

// corruptions is a task.Corruption that counts the skips of each task by
// where.
type corruptions struct {
	mu sync.Mutex
	n  map[[2]string]int
}

func (c *corruptions) CorruptRecord(_, id, where string, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[[2]string]int{}
	}
	c.n[[2]string{id, where}]++
}

func (c *corruptions) of(id, where string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[[2]string{id, where}]
}

// A task record that does not decode, with a queue message and in the
// undelivered index (put by hand): the sweep skips and reports it instead
// of ending the round there (before, it returned the decode error and the
// tasks after it were never looked at), gives up the others past their
// deadline, and once the corrupt task's message is past the deadline
// removes it: its task can never start, its conversation is freed. The
// exact times are TestDecideQueued's.
func TestSweepSkipsACorruptRecord(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	clock := time.Now()
	heard := &corruptions{}
	lc := f.lc.WithClock(func() time.Time { return clock }).WithCorruption(heard)

	bad := f.queue("m1", "alice")
	if _, err := f.env.Store.Tasks().Put(f.ctx, bad.TaskID, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	stuck := f.queue("m2", "bob")
	lc.Start(f.ctx, stuck, "queue", 1)
	offQueue := task.New("b", "m3", clock)
	offQueue.Chat = "carol"
	lc.Open(f.ctx, offQueue)
	lc.Start(f.ctx, task.MessageOf(offQueue), "local", 0)

	res, err := lc.Sweep(f.ctx, "b", time.Hour, time.Minute)
	if err != nil || res.Corrupt != 1 || !f.locked("alice") {
		t.Fatalf("early sweep: %+v %v, alice locked %v", res, err, f.locked("alice"))
	}
	// Past the deadline: the queue message's age is read on the server's
	// clock, so the deadline shrinks rather than this clock moving.
	clock = clock.Add(2 * time.Hour)
	f.olderThan("alice", time.Millisecond)
	res, err = lc.Sweep(f.ctx, "b", time.Millisecond, 0)
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if res.Deadline != 2 || res.Abandoned != 1 || res.Corrupt != 1 || f.locked("alice") || f.locked("bob") {
		t.Fatalf("sweep: %+v, alice locked %v, bob locked %v", res, f.locked("alice"), f.locked("bob"))
	}
	for _, id := range []string{stuck.TaskID, offQueue.ID} {
		if r := f.record(id); r.Exec != task.Failed || !strings.Contains(r.Error, "deadline") {
			t.Fatalf("%s: %s %q", id, r.Exec, r.Error)
		}
	}
	if n := heard.of(bad.TaskID, task.CorruptAtSweep); n != 2 {
		t.Fatalf("the corrupt record reported %d times over two sweeps, want 2 (once per round)", n)
	}
}

// RunSweep's rounds wait on the lifecycle's clock (WithTimers): once the
// clock has been stepped one sweep interval on, a round runs and gives up
// a task past its deadline; RunSweep ends with its context.
func TestRunSweepRoundsOnTheClock(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	stuck := f.queue("m1", "alice")
	// Its attempt began two hours ago.
	twoHoursAgo := f.lc.WithClock(func() time.Time { return time.Now().Add(-2 * time.Hour) })
	if _, _, err := twoHoursAgo.Start(f.ctx, stuck, "queue", 1); err != nil {
		t.Fatal(err)
	}
	clk := fakeclock.New(time.Now())
	lc := f.lc.WithTimers(clk).WithSweepInterval(time.Hour) // never within the test on a real clock
	ctx, cancel := context.WithCancel(f.ctx)
	ended := make(chan struct{})
	go func() { defer close(ended); lc.RunSweep(ctx, "b", time.Hour, 0) }()
	defer func() { cancel(); <-ended }()

	clk.AwaitWaiters(t, 1)
	clk.Step(time.Hour)
	testwait.Eventually(t, time.Minute, "alice's conversation freed by a round", func() bool { return !f.locked("alice") })
	if r := f.record(stuck.TaskID); r.Exec != task.Failed || !strings.Contains(r.Error, "deadline") {
		t.Fatalf("stuck task: %s %q", r.Exec, r.Error)
	}
}
