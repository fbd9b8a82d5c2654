package worker_test

import (
	"context"
	"encoding/json"
	"sync"
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

// recorder is a backend that answers "<name>" and keeps each prompt; with
// a gate, it answers once the gate is closed.
type recorder struct {
	name string
	gate chan struct{}

	mu      sync.Mutex
	prompts [][]ai.Message
}

func (r *recorder) Name() string { return r.name }

func (r *recorder) Stream(ctx context.Context, req ai.Request, emit func(string) error) error {
	r.mu.Lock()
	r.prompts = append(r.prompts, req.Messages)
	r.mu.Unlock()
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return emit(r.name)
}

func (r *recorder) last() []ai.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.prompts) == 0 {
		return nil
	}
	return r.prompts[len(r.prompts)-1]
}

// testBots are per-bot settings a test changes as it goes.
type testBots struct {
	mu   sync.Mutex
	runs map[string]worker.BotRun
}

func (b *testBots) Run(bot string) worker.BotRun {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runs[bot]
}

func (b *testBots) set(bot string, r worker.BotRun) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.runs[bot] = r
}

func publishFor(t *testing.T, store *jetstream.Store, bot, msgid, chat, question string) string {
	t.Helper()
	m := task.Message{TaskID: task.ID(bot, msgid), Bot: bot, MsgID: msgid, Chat: chat, Question: question, Received: time.Now()}
	raw, _ := json.Marshal(m)
	testwait.Eventually(t, waitLong, "task "+msgid+" queued", func() bool {
		_, err := store.PublishTask(context.Background(), bot, chat, msgid, raw)
		return err == nil // the conversation's previous task may not be acked yet
	})
	return m.TaskID
}

// Each task runs with its bot's backend and memory: a bot that keeps
// turns sees the earlier exchange, one that keeps none never does, and an
// idle conversation starts afresh. A bot's settings changing while its
// task runs leave that task on the backend it started with.
func TestEachTaskRunsWithItsBotsSettings(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	keep, none := &recorder{name: "keep"}, &recorder{name: "none"}
	bots := &testBots{runs: map[string]worker.BotRun{
		"keep": {Backend: keep, Memory: task.Memory{Turns: 20, Bytes: 16 << 10, IdleExpiry: time.Hour}},
		"none": {Backend: none, Memory: task.Memory{Turns: 0, Bytes: 16 << 10, IdleExpiry: time.Hour}},
	}}
	var skew atomic.Int64 // how far the worker's clock is ahead
	runWith(t, worker.Config{NodeID: "w1", Bots: bots, Store: env.Store, Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	succeeded := func(id string) {
		t.Helper()
		testwait.Eventually(t, waitLong, id+" succeeded", func() bool { return record(t, env.Store, id).Exec == task.Succeeded })
	}
	for _, bot := range []string{"keep", "none"} {
		succeeded(publishFor(t, env.Store, bot, bot+"-1", "ann", "first"))
		succeeded(publishFor(t, env.Store, bot, bot+"-2", "ann", "second"))
	}
	if p := keep.last(); len(p) != 3 || p[0].Content != "first" || p[1].Content != "keep" {
		t.Errorf("bot keep's second prompt: %+v, want the first exchange before the question", p)
	}
	if p := none.last(); len(p) != 1 || p[0].Content != "second" {
		t.Errorf("bot none's second prompt: %+v, want the question alone", p)
	}
	if o := answer(env.Store, task.ID("none", "none-2")); o.Text != "none" {
		t.Errorf("bot none answered %q by the wrong backend", o.Text)
	}
	// Two hours later (idle past the bot's hour) the conversation starts afresh.
	skew.Store(int64(2 * time.Hour))
	succeeded(publishFor(t, env.Store, "keep", "keep-3", "ann", "third"))
	if p := keep.last(); len(p) != 1 || p[0].Content != "third" {
		t.Errorf("after 2h idle: %+v, want the question alone", p)
	}

	// The settings change while a task runs: it keeps its backend.
	slow := &recorder{name: "slow", gate: make(chan struct{})}
	bots.set("keep", worker.BotRun{Backend: slow, Memory: task.Memory{Turns: 20, Bytes: 16 << 10}})
	id := publishFor(t, env.Store, "keep", "keep-4", "bob", "q")
	testwait.Eventually(t, waitLong, "the task running on slow", func() bool { return slow.last() != nil })
	bots.set("keep", worker.BotRun{Backend: keep, Memory: task.Memory{Turns: 20, Bytes: 16 << 10}})
	close(slow.gate)
	succeeded(id)
	if o := answer(env.Store, id); o.Text != "slow" {
		t.Errorf("a running task's answer: %q, want the backend it started with", o.Text)
	}
	succeeded(publishFor(t, env.Store, "keep", "keep-5", "bob", "q2"))
	if o := answer(env.Store, task.ID("keep", "keep-5")); o.Text != "keep" {
		t.Errorf("the next task's answer: %q, want the new backend's", o.Text)
	}
}
