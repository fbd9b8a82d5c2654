package access

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

// A task whose answer is complete but not yet delivered in full (out of
// the queue, still in the undelivered index) is what /status and /stop
// find: "being sent", and /stop cannot stop it; once delivered, neither
// finds a task.
func TestStatusAndStopSeeAnAnswerStillBeingSent(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now()
	lc := task.NewLifecycle(env.Store, "n1", zerolog.Nop())
	js := &bound{store: env.Store, lc: lc}
	a := &Access{cfg: Config{Timeout: 10 * time.Second, Now: func() time.Time { return now }}}

	m := task.Message{TaskID: task.ID("b", "m1"), Bot: "b", MsgID: "m1", Chat: "alice", Question: "what is botctl?", Received: now.Add(-90 * time.Second)}
	if _, err := lc.Open(ctx, task.RecordOf(m)); err != nil {
		t.Fatal(err)
	}
	n, _, err := lc.Start(ctx, m, "queue", 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := lc.Finish(ctx, m.TaskID, n, "the answer")
	if err != nil {
		t.Fatal(err)
	}

	status := a.command(ctx, js, nil, "b", "alice", "/status")
	if !strings.Contains(status, "正在发送") || !strings.Contains(status, "what is botctl?") || !strings.Contains(status, "1m30s") {
		t.Fatalf("/status of an answer being sent: %q", status)
	}
	if got := a.command(ctx, js, nil, "b", "bob", "/status"); !strings.Contains(got, "当前没有正在进行的任务") {
		t.Fatalf("/status of another conversation: %q", got)
	}
	if got := a.command(ctx, js, nil, "b", "alice", "/stop"); !strings.Contains(got, "正在发送中，无法停止") {
		t.Fatalf("/stop of an answer being sent: %q", got)
	}
	if r, _, err := task.Get(ctx, env.Store.Tasks(), m.TaskID); err != nil || r.Exec != task.Succeeded {
		t.Fatalf("the answer's record after /stop: %+v (%v), want still succeeded", r, err)
	}

	if _, err := lc.Delivered(ctx, r, "the answer", "final frame acked", 0); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"/status", "/stop"} {
		if got := a.command(ctx, js, nil, "b", "alice", cmd); !strings.Contains(got, "当前没有正在进行的任务") {
			t.Fatalf("%s once delivered: %q", cmd, got)
		}
	}
}
