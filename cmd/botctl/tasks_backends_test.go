package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

// `botctl tasks show` says which AI backend answered and what became of
// each one asked before it.
func TestTasksShowListsBackends(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	lc := task.NewLifecycle(env.Store, "w1", zerolog.Nop())
	r := task.New("b", "m1", time.Now())
	r.Chat, r.ChatType, r.User = "alice", "single", "alice"
	ctx := context.Background()
	if _, err := lc.Open(ctx, r); err != nil {
		t.Fatal(err)
	}
	attempt, _, err := lc.Start(ctx, task.MessageOf(r), "queue", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Finish(ctx, r.ID, attempt, "answer",
		task.BackendStep{Backend: "openai:gpt-4o", Outcome: "failed", Reason: "ai: backend failed: connection refused"},
		task.BackendStep{Backend: "demo", Outcome: "answered"}); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "tasks", "show", r.ID, "--nats", env.Server.ClientURL())
	if err != nil {
		t.Fatalf("show: %v\n%s", err, out)
	}
	for _, want := range []string{"answered  by demo\n", "backend   attempt 1: openai:gpt-4o failed: ai: backend failed: connection refused\n",
		"backend   attempt 1: demo answered\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("show:\n%s\nwant %q", out, want)
		}
	}
}
