package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/worker"
	"github.com/rs/zerolog"
)

type offSkew struct{ off atomic.Bool }

func (c *offSkew) Off() (string, bool) { return "40m off", c.off.Load() }

// A worker whose node's clock is off fetches no task: the record it would
// write (started, deadline) would be compared with other nodes' clocks
// (issue 25 item 10). Once the clock is right it runs the task.
func TestWorkerWithAClockOffRunsNothing(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	c := &offSkew{}
	c.off.Store(true)
	runWith(t, worker.Config{NodeID: "w1", Backend: demo(t, 10*time.Millisecond), Store: env.Store, Skew: c})
	m := publish(t, env.Store, "m1", "alice", "q")
	time.Sleep(3 * time.Second) // a negative check: several fetch rounds
	if r := record(t, env.Store, m.TaskID); r.Attempt != 0 {
		t.Fatalf("a worker with its clock off started the task: %+v", r)
	}
	c.off.Store(false)
	testwait.Eventually(t, waitLong, "the task to run once the clock is right", func() bool {
		return record(t, env.Store, m.TaskID).Exec == task.Succeeded
	})
}

// Off the queue (a fixed worker's POST /v1/exec, the leader's own tier) a
// clock that is off refuses the task naming the clock, not the slots: the
// caller (and the operator reading its log) learns why.
func TestOffQueueWorkRefusedWhileTheClockIsOff(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	c := &offSkew{}
	c.off.Store(true)
	w, err := worker.New(worker.Config{NodeID: "w1", Slots: 2, Backend: demo(t, time.Millisecond), Store: env.Store, Logger: zerolog.Nop(), Skew: c})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	m := task.Message{TaskID: task.ID("b", "m1"), Bot: "b", MsgID: "m1", Chat: "c1", Question: "q"}
	err = w.Go(context.Background(), m, "fixed", &wg)
	if !errors.Is(err, worker.ErrClockOff) || !strings.Contains(err.Error(), "40m off") {
		t.Fatalf("task on a worker whose clock is off: %v, want ErrClockOff naming the offset", err)
	}
	c.off.Store(false)
	if err := w.Go(context.Background(), m, "fixed", &wg); err != nil {
		t.Fatalf("task once the clock is right: %v", err)
	}
}
