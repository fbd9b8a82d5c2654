package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/worker"
	"github.com/rs/zerolog"
)

// gated is a backend whose answers wait for open to close; it records how
// many run at once, and says on entered who came in.
type gated struct {
	entered chan string
	open    chan struct{}

	mu           sync.Mutex
	inside, most int
}

func newGated() *gated {
	return &gated{entered: make(chan string, 64), open: make(chan struct{})}
}

func (g *gated) Name() string { return "gated" }
func (g *gated) Stream(ctx context.Context, req ai.Request, emit func(string) error) error {
	g.mu.Lock()
	g.inside++
	g.most = max(g.most, g.inside)
	g.mu.Unlock()
	defer func() { g.mu.Lock(); g.inside--; g.mu.Unlock() }()
	g.entered <- req.TaskID
	if err := emit("answer to " + req.Question()); err != nil {
		return err
	}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gated) mostAtOnce() int { g.mu.Lock(); defer g.mu.Unlock(); return g.most }

// openTask records a task as access does (queued, attempt 0), then queues it.
func openTask(t *testing.T, store *jetstream.Store, lc *task.Lifecycle, msgid, chat string) task.Message {
	t.Helper()
	m := task.Message{TaskID: task.ID("b", msgid), Bot: "b", MsgID: msgid, Chat: chat, Question: "q " + msgid}
	if _, err := lc.Open(context.Background(), task.RecordOf(m)); err != nil {
		t.Fatal(err)
	}
	return publish(t, store, msgid, chat, m.Question)
}

// ai.max_concurrency: with more slots than tokens, no more than the limit
// call the backend at once; the others are not started (record queued,
// attempt 0: the pusher shows them queued), and run as tokens come back.
func TestAIConcurrencyLimit(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	lc := task.NewLifecycle(env.Store, "leader", zerolog.Nop())
	g := newGated()
	w := runWith(t, worker.Config{NodeID: "w1", Backend: g, Store: env.Store, Slots: 8, AIConcurrency: 2})
	var tasks []task.Message
	for i := range 5 {
		tasks = append(tasks, openTask(t, env.Store, lc, fmt.Sprintf("m%d", i), fmt.Sprintf("chat%d", i)))
	}
	started := map[string]bool{<-g.entered: true, <-g.entered: true}
	if w.InAI() != 2 {
		t.Fatalf("tokens held = %d, want 2", w.InAI())
	}
	for _, m := range tasks {
		r := record(t, env.Store, m.TaskID)
		switch {
		case started[m.TaskID] && r.Exec != task.Running:
			t.Fatalf("%s calls the backend but its record is %s", m.TaskID, r.Exec)
		case !started[m.TaskID] && (r.Exec != task.Queued || r.Attempt != 0):
			t.Fatalf("%s waits for a token but its record is %s, attempt %d (want queued, 0)", m.TaskID, r.Exec, r.Attempt)
		}
	}
	close(g.open)
	for _, m := range tasks {
		testwait.Eventually(t, waitLong, m.TaskID+" succeeded", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
		if r := record(t, env.Store, m.TaskID); r.Attempt != 1 {
			t.Fatalf("%s: attempt %d, want 1", m.TaskID, r.Attempt)
		}
	}
	if n := g.mostAtOnce(); n != 2 {
		t.Fatalf("at most %d answers at once, want 2 (ai.max_concurrency)", n)
	}
}

// A fallback tier's task waits for a token like a queue task: not started
// while it waits; and if its node stops meanwhile (its only attempt), it is
// failed with the reason instead of staying queued with nobody to run it.
func TestFallbackTierWaitsForToken(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	lc := task.NewLifecycle(env.Store, "leader", zerolog.Nop())
	g := newGated()
	w := runWith(t, worker.Config{NodeID: "w1", Backend: g, Store: env.Store, AIConcurrency: 1})
	holder := openTask(t, env.Store, lc, "m0", "alice")
	if got := <-g.entered; got != holder.TaskID {
		t.Fatalf("entered %s", got)
	}

	local := task.Message{TaskID: task.ID("b", "m1"), Bot: "b", MsgID: "m1", Chat: "bob", Question: "q"}
	if _, err := lc.Open(context.Background(), task.RecordOf(local)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Execute(context.Background(), local, "local") }()
	testwait.Eventually(t, waitLong, "the local task waits for a token", func() bool { return w.Waiting() == 1 })
	if r := record(t, env.Store, local.TaskID); r.Exec != task.Queued || r.Attempt != 0 {
		t.Fatalf("waiting local task: %s attempt %d, want queued 0", r.Exec, r.Attempt)
	}

	stopped := task.Message{TaskID: task.ID("b", "m2"), Bot: "b", MsgID: "m2", Chat: "carol", Question: "q"}
	if _, err := lc.Open(context.Background(), task.RecordOf(stopped)); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	stopDone := make(chan error, 1)
	go func() { stopDone <- w.Execute(ctx, stopped, "local") }()
	testwait.Eventually(t, waitLong, "both wait", func() bool { return w.Waiting() == 2 })
	stop()
	if err := <-stopDone; err == nil || !strings.Contains(err.Error(), "AI concurrency token") {
		t.Fatalf("stopped while waiting: err = %v", err)
	}
	if r := record(t, env.Store, stopped.TaskID); r.Exec != task.Failed || !strings.Contains(r.Error, "token") {
		t.Fatalf("stopped while waiting: %s %q, want failed with the reason", r.Exec, r.Error)
	}

	close(g.open)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r := record(t, env.Store, local.TaskID); r.Exec != task.Succeeded || r.Attempt != 1 {
		t.Fatalf("local task: %s attempt %d", r.Exec, r.Attempt)
	}
	testwait.Eventually(t, waitLong, "queue task succeeded", func() bool { return record(t, env.Store, holder.TaskID).Exec == task.Succeeded })
	if g.mostAtOnce() != 1 {
		t.Fatalf("at most %d at once, want 1", g.mostAtOnce())
	}
}

func TestAIConcurrencyValidated(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	_, err := worker.New(worker.Config{NodeID: "n", Backend: newGated(), Store: env.Store, AIConcurrency: -1})
	if err == nil || !strings.Contains(err.Error(), "AIConcurrency") {
		t.Fatalf("err = %v", err)
	}
}
