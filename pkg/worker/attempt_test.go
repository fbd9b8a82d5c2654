package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/task"
)

// attemptBackend fails its first try (ErrBackend: retried) and answers
// the next, recording each request's task id and attempt.
type attemptBackend struct {
	mu   sync.Mutex
	seen []string
}

func (*attemptBackend) Name() string { return "attempt-test" }
func (b *attemptBackend) Stream(ctx context.Context, req ai.Request, emit func(string) error) error {
	b.mu.Lock()
	b.seen = append(b.seen, fmt.Sprintf("%s#%d", req.TaskID, req.Attempt))
	n := len(b.seen)
	b.mu.Unlock()
	if n == 1 {
		return fmt.Errorf("%w: first try fails", ai.ErrBackend)
	}
	return emit("ok")
}

// The backend is told the worker's attempt: the same task id, attempt 1
// then 2 (the http backend sends them as Idempotency-Key and
// X-Botctl-Attempt).
func TestRequestCarriesTheAttempt(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	b := &attemptBackend{}
	run(t, env.Store, "w1", b)
	m := task.Message{TaskID: task.ID("b", "m1"), Bot: "b", MsgID: "m1", Chat: "alice", Question: "q", Received: time.Now()}
	publishMessage(t, env.Store, m)
	testwait.Eventually(t, waitLong, "succeeded", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
	b.mu.Lock()
	defer b.mu.Unlock()
	want := []string{m.TaskID + "#1", m.TaskID + "#2"}
	if fmt.Sprint(b.seen) != fmt.Sprint(want) {
		t.Fatalf("requests %v, want %v", b.seen, want)
	}
}
