package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

// `botctl tasks show` shows the backend's thinking stored with the
// output (whatever the bot's ai.show_thinking): a line, and whole in
// --json.
func TestTasksShowTheThinking(t *testing.T) {
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
	w := lc.Output(r.ID, "b", attempt)
	w.SetThinking("Let me look.\n🔧 search: done\n", "🔧 search: done\n")
	if err := w.Final(ctx, "answer"); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Finish(ctx, r.ID, attempt, "answer"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "tasks", "show", r.ID, "--nats", env.Server.ClientURL())
	if err != nil {
		t.Fatalf("show: %v\n%s", err, out)
	}
	if want := "thinking  31 bytes, 1 tool steps: Let me look. 🔧 search: done\n"; !strings.Contains(out, want) {
		t.Errorf("show:\n%s\nwant %q", out, want)
	}
	out, err = run(t, "tasks", "show", r.ID, "--json", "--nats", env.Server.ClientURL())
	if err != nil {
		t.Fatalf("show --json: %v\n%s", err, out)
	}
	var v struct {
		Output struct{ Thinking, Tools string } `json:"output"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Output.Thinking != "Let me look.\n🔧 search: done\n" || v.Output.Tools != "🔧 search: done\n" {
		t.Errorf("show --json: %+v, %v\n%s", v, err, out)
	}
}
