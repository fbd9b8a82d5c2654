package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/testenv"
	"github.com/botctl/botctl/pkg/worker"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

const waitLong = 30 * time.Second

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func demo(t *testing.T, answer time.Duration) ai.Backend {
	t.Helper()
	b, err := ai.New(ai.Config{Kind: ai.KindDemo, Demo: ai.DemoConfig{AnswerTime: answer}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func run(t *testing.T, store *jetstream.Store, node string, b ai.Backend) context.CancelFunc {
	t.Helper()
	w, err := worker.New(worker.Config{NodeID: node, Slots: 4, Backend: b, Store: store, RetryDelay: 100 * time.Millisecond, OutputInterval: 50 * time.Millisecond, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func publish(t *testing.T, store *jetstream.Store, msgid, chat, question string) task.Message {
	t.Helper()
	m := task.Message{TaskID: task.ID("b", msgid), Bot: "b", MsgID: msgid, Chat: chat, Question: question, Received: time.Now()}
	raw, _ := json.Marshal(m)
	if _, err := store.PublishTask(context.Background(), "b", chat, msgid, raw); err != nil {
		t.Fatal(err)
	}
	return m
}

func record(t *testing.T, store *jetstream.Store, id string) *task.Record {
	r, _, err := task.Get(context.Background(), store.Tasks(), id)
	if err != nil {
		return &task.Record{}
	}
	return r
}

func output(store *jetstream.Store, id string) *task.Output {
	o, _ := task.GetOutput(context.Background(), store.Output(), id)
	if o == nil {
		return &task.Output{}
	}
	return o
}

func TestTaskRunsToOutputAndFreesConversation(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	run(t, env.Store, "w1", demo(t, 300*time.Millisecond))
	m := publish(t, env.Store, "m1", "alice", "what is botctl?")

	eventually(t, "output done", func() bool { return output(env.Store, m.TaskID).Done })
	o := output(env.Store, m.TaskID)
	if !strings.HasPrefix(o.Text, "You asked: what is botctl?") || o.Canceled || o.Error != "" {
		t.Fatalf("output = %+v", o)
	}
	eventually(t, "record succeeded", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
	r := record(t, env.Store, m.TaskID)
	if r.Attempt != 1 || r.Node != "w1" || r.Tier != "queue" {
		t.Fatalf("record = %+v", r)
	}
	// The ack freed the conversation: a new task for it is accepted.
	eventually(t, "conversation free", func() bool {
		raw, _ := json.Marshal(task.Message{TaskID: task.ID("b", "m2"), Bot: "b", MsgID: "m2", Chat: "alice", Question: "and then?"})
		_, err := env.Store.PublishTask(context.Background(), "b", "alice", "m2", raw)
		return err == nil
	})
	// Multi-turn: the second task's prompt saw the first exchange.
	var conv *task.Conversation
	eventually(t, "both exchanges in the conversation context", func() bool {
		conv, _, _ = task.LoadConversation(context.Background(), env.Store.Context(), jetstream.ConversationKey("b", "alice"))
		return conv != nil && len(conv.Turns) == 4
	})
	if conv.Turns[0].Content != "what is botctl?" || conv.Turns[2].Content != "and then?" || conv.Turns[1].Role != "assistant" {
		t.Fatalf("conversation = %+v", conv)
	}
}

// Output is written coalesced: far fewer writes than deltas.
func TestOutputIsCoalesced(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	run(t, env.Store, "w1", demo(t, time.Second)) // ~20 deltas
	m := publish(t, env.Store, "m1", "alice", "q")
	w, err := env.Store.Output().Watch(context.Background(), m.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	writes := 0
	timeout := time.After(waitLong)
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				continue
			}
			writes++
			if o, _ := task.DecodeOutput(e.Value()); o != nil && o.Done {
				// 1 s at 50 ms per write is at most ~21 writes; with
				// coalescing off it would be one per delta as well, so
				// check the text grew monotonically and the count is bounded.
				if writes > 30 {
					t.Fatalf("%d output writes for a 1 s answer", writes)
				}
				return
			}
		case <-timeout:
			t.Fatal("no final output")
		}
	}
}

// /stop marks the record canceled and announces it: the worker stops at
// once. Without the announcement (a worker that was reconnecting) it still
// stops, from its periodic re-read of the record.
func TestStopCancels(t *testing.T) {
	t.Run("announced", func(t *testing.T) { testStop(t, true) })
	t.Run("announcement missed", func(t *testing.T) { testStop(t, false) })
}

func testStop(t *testing.T, announce bool) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	run(t, env.Store, "w1", demo(t, time.Minute))
	m := publish(t, env.Store, "m1", "alice", "long one")
	eventually(t, "running", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Running })
	start := time.Now()
	if _, err := task.Update(context.Background(), env.Store.Tasks(), m.TaskID, func(r *task.Record) error {
		return r.SetExec(task.Canceled, "/stop", "leader", time.Now())
	}); err != nil {
		t.Fatal(err)
	}
	if announce {
		if err := worker.Cancel(env.Conn, m.TaskID); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "output canceled", func() bool { return output(env.Store, m.TaskID).Canceled })
	t.Logf("stopped %s after the cancel", time.Since(start))
	// Freed: a new task for the conversation is accepted.
	eventually(t, "conversation free", func() bool {
		raw, _ := json.Marshal(task.Message{TaskID: task.ID("b", "m2"), Bot: "b", MsgID: "m2", Chat: "alice", Question: "q"})
		_, err := env.Store.PublishTask(context.Background(), "b", "alice", "m2", raw)
		return err == nil
	})
	if r := record(t, env.Store, m.TaskID); r.Exec != task.Canceled {
		t.Fatalf("exec = %s", r.Exec)
	}
}

type failing struct{ calls atomic.Int32 }

func (f *failing) Name() string { return "failing" }
func (f *failing) Stream(ctx context.Context, req ai.Request, emit func(string) error) error {
	f.calls.Add(1)
	emit("partial")
	return ai.ErrBackend
}

// A task that keeps failing is retried up to MaxDeliver, then given up:
// recorded failed with the reason, and its conversation is free again.
func TestFailingTaskGivenUpAfterMaxDeliver(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{TaskMaxDeliver: 3})
	f := &failing{}
	run(t, env.Store, "w1", f)
	m := publish(t, env.Store, "m1", "alice", "q")
	eventually(t, "failed", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Failed })
	r := record(t, env.Store, m.TaskID)
	if f.calls.Load() != 3 || r.Attempt != 3 || !strings.Contains(r.Error, "gave up after 3 attempts") {
		t.Fatalf("calls %d, record %+v", f.calls.Load(), r)
	}
	if o := output(env.Store, m.TaskID); !o.Done || o.Error == "" {
		t.Fatalf("output should be marked done with the error: %+v", o)
	}
	raw, _ := json.Marshal(task.Message{TaskID: task.ID("b", "m2"), Bot: "b", MsgID: "m2", Chat: "alice", Question: "q"})
	if _, err := env.Store.PublishTask(context.Background(), "b", "alice", "m2", raw); err != nil {
		t.Fatalf("conversation still locked: %v", err)
	}
}

type refusing struct{}

func (refusing) Name() string { return "refusing" }
func (refusing) Stream(context.Context, ai.Request, func(string) error) error {
	return ai.ErrBadRequest
}

func TestBadRequestIsNotRetried(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{TaskMaxDeliver: 5})
	run(t, env.Store, "w1", refusing{})
	m := publish(t, env.Store, "m1", "alice", "q")
	eventually(t, "failed", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Failed })
	if r := record(t, env.Store, m.TaskID); r.Attempt != 1 {
		t.Fatalf("attempts = %d, want 1", r.Attempt)
	}
}

// A worker that dies mid-task (its connection gone, no ack): the task is
// redelivered after the ack wait and another worker finishes it; the
// record counts the attempt.
func TestWorkerCrashIsRetriedElsewhere(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{TaskAckWait: 2 * time.Second})
	// The doomed worker has its own connection, which the test cuts.
	nc, err := nats.Connect(env.Server.ClientURL(), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := natsjs.New(nc)
	doomedStore, err := jetstream.Declare(context.Background(), js, jetstream.Options{TaskAckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	run(t, doomedStore, "doomed", demo(t, time.Minute))
	m := publish(t, env.Store, "m1", "alice", "q")
	eventually(t, "running on doomed", func() bool { return record(t, env.Store, m.TaskID).Node == "doomed" })
	nc.Close() // crash: no ack, no nak, no in-progress

	run(t, env.Store, "survivor", demo(t, 200*time.Millisecond))
	eventually(t, "succeeded on survivor", func() bool {
		r := record(t, env.Store, m.TaskID)
		return r.Exec == task.Succeeded && r.Node == "survivor"
	})
	if r := record(t, env.Store, m.TaskID); r.Attempt < 2 {
		t.Fatalf("attempt = %d, want ≥ 2", r.Attempt)
	}
}

func TestConfigRequired(t *testing.T) {
	if _, err := worker.New(worker.Config{NodeID: "n"}); err == nil || !strings.Contains(err.Error(), "Backend") {
		t.Fatalf("err = %v", err)
	}
	_ = errors.New
}
