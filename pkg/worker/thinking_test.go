package worker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/task"
)

// thinkBackend thinks, steps a tool, waits for release, then answers
// "ok" (after thinking extra, if any).
type thinkBackend struct {
	release chan struct{}
	extra   string
}

func (thinkBackend) Name() string { return "think-test" }
func (b thinkBackend) Stream(ctx context.Context, req ai.Request, emit func(string) error) error {
	ai.Think(ctx, "Let me ")
	ai.Think(ctx, "look.")
	ai.ThinkTool(ctx, ai.ToolStep{Name: "search", Status: ai.ToolStarted})
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	ai.ThinkTool(ctx, ai.ToolStep{Name: "search", Status: ai.ToolDone})
	ai.Think(ctx, b.extra)
	return emit("ok")
}

// The backend's thinking is stored with the text: while the answer runs
// (the progress bucket, where a new leader resumes it) and with the
// answer, tool steps a line each and also apart (Tools).
func TestThinkingStoredWithTheOutput(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	b := thinkBackend{release: make(chan struct{})}
	run(t, env.Store, "w1", b)
	m := publish(t, env.Store, "m1", "alice", "q")
	testwait.Eventually(t, waitLong, "thinking in progress", func() bool {
		return output(env.Store, m.TaskID).Thinking == "Let me look.\n🔧 search: started\n"
	})
	close(b.release)
	testwait.Eventually(t, waitLong, "succeeded", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
	o := answer(env.Store, m.TaskID)
	if o.Text != "ok" || o.Thinking != "Let me look.\n🔧 search: started\n🔧 search: done\n" || o.Tools != "🔧 search: started\n🔧 search: done\n" {
		t.Fatalf("output %+v", o)
	}
}

// Thinking past task.MaxThinkingBytes is cut there, with "…"; the
// answer is whole.
func TestThinkingIsCapped(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	b := thinkBackend{release: make(chan struct{}), extra: strings.Repeat("想", task.MaxThinkingBytes)}
	close(b.release)
	run(t, env.Store, "w1", b)
	m := publish(t, env.Store, "m1", "alice", "q")
	testwait.Eventually(t, waitLong, "succeeded", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
	o := answer(env.Store, m.TaskID)
	if o.Text != "ok" || !strings.HasSuffix(o.Thinking, "想…") || task.OutputTextBytes(o.Thinking) > task.MaxThinkingBytes ||
		task.OutputTextBytes(o.Thinking) < task.MaxThinkingBytes-8 {
		t.Fatalf("text %q, thinking of %d bytes ending %q", o.Text, task.OutputTextBytes(o.Thinking), o.Thinking[max(0, len(o.Thinking)-12):])
	}
}
