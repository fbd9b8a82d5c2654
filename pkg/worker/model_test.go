package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/limits"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/worker"
)

// flaky fails its first call (after reporting what it cost) and answers
// the next, reporting usage each time, as a backend that knows its cost.
type flaky struct{ calls atomic.Int32 }

func (f *flaky) Name() string { return "flaky:m" }

func (f *flaky) Stream(ctx context.Context, req ai.Request, emit func(string) error) error {
	ai.ReportUsage(ctx, ai.Usage{In: 100, Out: 10})
	if f.calls.Add(1) == 1 {
		return fmt.Errorf("%w: flaky: HTTP 503", ai.ErrBackend)
	}
	return emit("answer")
}

// modelMetrics keeps each call the worker reports.
type modelMetrics struct {
	mu    sync.Mutex
	calls []worker.Call
}

func (m *modelMetrics) NATSError(string) {}

func (m *modelMetrics) Answered(bot, backend string, c worker.Call) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if bot == "b1" && backend == "flaky:m" {
		m.calls = append(m.calls, c)
	}
}

func (m *modelMetrics) all() []worker.Call {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]worker.Call(nil), m.calls...)
}

// Every call of a backend is reported with its error class, its time to
// first token and what it cost; the task's record sums every attempt's
// usage (the failed one was paid for too), and so do the bot's token
// counts when it has a token limit.
func TestEachCallReportedWithItsUsage(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	l := limits.Limits{User: limits.Set{TokensPerDay: 1000}}
	bots := &testBots{runs: map[string]worker.BotRun{"b1": {Backend: &flaky{}, Limits: l}}}
	mm := &modelMetrics{}
	runWith(t, worker.Config{NodeID: "w1", Bots: bots, Store: env.Store, Metrics: mm})
	m := task.Message{Bot: "b1", MsgID: "m1", Chat: "c1"}
	id := publishFor(t, env.Store, m.Bot, m.MsgID, m.Chat, "q")
	testwait.Eventually(t, waitLong, "the task succeeded on its second attempt", func() bool { return record(t, env.Store, id).Exec == task.Succeeded })

	calls := mm.all()
	if len(calls) != 2 {
		t.Fatalf("%d calls reported, want 2: %+v", len(calls), calls)
	}
	if c := calls[0]; c.ErrKind != ai.ErrorClassBackend || c.FirstToken != 0 || !c.Reported || c.Usage != (ai.Usage{In: 100, Out: 10}) {
		t.Errorf("the failed call: %+v, want kind backend, no first token, its usage", c)
	}
	if c := calls[1]; c.ErrKind != "" || c.FirstToken <= 0 || c.Duration < c.FirstToken || c.Usage != (ai.Usage{In: 100, Out: 10}) {
		t.Errorf("the answered call: %+v, want no error, a first token, its usage", c)
	}
	if u := record(t, env.Store, id).Usage; u == nil || *u != (task.Usage{In: 200, Out: 20}) {
		t.Errorf("the record's usage %+v, want both attempts': in 200, out 20", u)
	}
	// publishFor's message names no user: the counts are the empty user's.
	use, err := limits.New(env.Store.Limits(), nil).Read(context.Background(), limits.UserKey("b1", ""))
	if err != nil {
		t.Fatal(err)
	}
	if use.Tokens != 220 {
		t.Errorf("the user's tokens today: %d, want 220", use.Tokens)
	}
}
