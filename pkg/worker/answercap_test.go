package worker_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/worker"
)

// counting counts the answers asked of its backend.
type counting struct {
	ai.Backend
	calls atomic.Int32
}

func (c *counting) Stream(ctx context.Context, req ai.Request, emit func(string) error) error {
	c.calls.Add(1)
	return c.Backend.Stream(ctx, req, emit)
}

// An answer longer than the cap is cut there, the note appended, stored
// once and finished: the task runs once. Before the cap, an answer over
// the output bucket's largest value (1 MiB) was never stored and the task
// ran again on every delivery, to fail for good on the last.
func TestAnswerOverTheCapIsTruncatedAndStoredOnce(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{TaskMaxDeliver: 3})
	b, err := ai.New(ai.Config{Kind: ai.KindDemo, Demo: ai.DemoConfig{AnswerTime: 300 * time.Millisecond, AnswerBytes: 1_500_000}})
	if err != nil {
		t.Fatal(err)
	}
	backend := &counting{Backend: b}
	// The default cap; a short patience, so that an answer that cannot be
	// stored fails its attempt within the test's wait.
	runWith(t, worker.Config{NodeID: "w1", Backend: backend, Store: env.Store, StorePatience: time.Second})
	m := publish(t, env.Store, "m1", "alice", "tell me everything")

	testwait.Eventually(t, 2*waitLong, "task finished", func() bool { return record(t, env.Store, m.TaskID).Exec.Finished() })
	r := record(t, env.Store, m.TaskID)
	if r.Exec != task.Succeeded || r.Attempt != 1 || backend.calls.Load() != 1 {
		t.Fatalf("record %s after %d attempts (%d answers asked; error %q), want succeeded after one", r.Exec, r.Attempt, backend.calls.Load(), r.Error)
	}
	o := answer(env.Store, m.TaskID)
	note := "\n\n" + worker.DefaultTruncatedNote
	body, ok := strings.CutSuffix(o.Text, note)
	if !ok {
		t.Fatalf("stored answer (%d bytes) does not end with the truncation note: …%q", len(o.Text), o.Text[max(0, len(o.Text)-80):])
	}
	if n := task.OutputTextBytes(body); n > worker.DefaultMaxAnswerBytes || n < worker.DefaultMaxAnswerBytes-8 {
		t.Fatalf("answer cut at %d stored bytes, want just under the cap %d", n, worker.DefaultMaxAnswerBytes)
	}
	if !strings.HasPrefix(body, "You asked: tell me everything") {
		t.Fatalf("stored answer starts %q, want the backend's answer", body[:40])
	}
	// The record names exactly the stored text: the pusher delivers it.
	if task.Hash(o.Text) != r.AnswerHash || r.AnswerBytes != len(o.Text) || o.Attempt != 1 {
		t.Fatalf("record answer %s/%d, output %s/%d of attempt %d", r.AnswerHash, r.AnswerBytes, task.Hash(o.Text), len(o.Text), o.Attempt)
	}
	testwait.Eventually(t, waitLong, "conversation free", func() bool { return free(t, env.Store, "alice", "m2") })
}

// A cap below the answer works the same at any size, and a cap over what
// the output bucket can hold is refused.
func TestAnswerCapConfigured(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	b, err := ai.New(ai.Config{Kind: ai.KindDemo, Demo: ai.DemoConfig{AnswerTime: 200 * time.Millisecond, AnswerBytes: 50_000}})
	if err != nil {
		t.Fatal(err)
	}
	runWith(t, worker.Config{NodeID: "w1", Backend: b, Store: env.Store, MaxAnswerBytes: 1000, TruncatedNote: "[cut]"})
	m := publish(t, env.Store, "m1", "alice", "q")
	testwait.Eventually(t, waitLong, "task succeeded", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
	text := answer(env.Store, m.TaskID).Text
	body, ok := strings.CutSuffix(text, "\n\n[cut]")
	if !ok || task.OutputTextBytes(body) > 1000 || task.OutputTextBytes(body) < 990 {
		t.Fatalf("stored %q", text)
	}
	if _, err := worker.New(worker.Config{NodeID: "w", Backend: b, Store: env.Store, MaxAnswerBytes: 2 << 20}); err == nil || !strings.Contains(err.Error(), "MaxAnswerBytes") {
		t.Fatalf("a 2 MiB cap: %v, want refused", err)
	}
}
