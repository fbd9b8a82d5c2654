package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/worker"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

const waitLong = 30 * time.Second

func demo(t testing.TB, answer time.Duration) ai.Backend {
	t.Helper()
	b, err := ai.New(ai.Config{Kind: ai.KindDemo, Demo: ai.DemoConfig{AnswerTime: answer}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type running struct {
	*worker.Worker
	stop func() // ends Run and waits for it
}

func run(t *testing.T, store *jetstream.Store, node string, b ai.Backend) running {
	t.Helper()
	return runWith(t, worker.Config{NodeID: node, Backend: b, Store: store})
}

func runWith(t *testing.T, cfg worker.Config) running {
	t.Helper()
	if cfg.Slots == 0 {
		cfg.Slots = 4
	}
	cfg.RetryDelay, cfg.OutputInterval = 100*time.Millisecond, 50*time.Millisecond
	cfg.Logger = zerolog.Nop()
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return running{w, stop}
}

// free reports whether the conversation takes a new task (and queues one).
func free(t *testing.T, store *jetstream.Store, chat, msgid string) bool {
	raw, _ := json.Marshal(task.Message{TaskID: task.ID("b", msgid), Bot: "b", MsgID: msgid, Chat: chat, Question: "next"})
	_, err := store.PublishTask(context.Background(), "b", chat, msgid, raw)
	return err == nil
}

func publish(t testing.TB, store *jetstream.Store, msgid, chat, question string) task.Message {
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

// output is task id's text in progress (or, with none, its attempt's
// last write): for a task still running.
func output(store *jetstream.Store, id string) *task.Output { return readOutput(store, id, false) }

// answer is finished task id's answer: its attempt's last write, in the
// output bucket, read as the pusher reads a finished task's. Not output:
// the worker drops its text in progress only after the record says the
// task is finished, so a read of the progress bucket just then finds a
// version older than the answer (seen under load: the answer without its
// last lines, or without its truncation note).
func answer(store *jetstream.Store, id string) *task.Output { return readOutput(store, id, true) }

func readOutput(store *jetstream.Store, id string, finished bool) *task.Output {
	o, _ := task.ReadOutput(context.Background(), store, id, finished)
	if o == nil {
		return &task.Output{}
	}
	return o
}

func TestTaskRunsToOutputAndFreesConversation(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	run(t, env.Store, "w1", demo(t, 300*time.Millisecond))
	m := publish(t, env.Store, "m1", "alice", "what is botctl?")

	testwait.Eventually(t, waitLong, "record succeeded", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
	r := record(t, env.Store, m.TaskID)
	if r.Attempt != 1 || r.Node != "w1" || r.Tier != "queue" {
		t.Fatalf("record = %+v", r)
	}
	// The output is the answer the record names, written by its attempt.
	o := answer(env.Store, m.TaskID)
	if !strings.HasPrefix(o.Text, "You asked: what is botctl?") || o.Attempt != 1 || task.Hash(o.Text) != r.AnswerHash || r.AnswerBytes != len(o.Text) {
		t.Fatalf("output = %+v, record answer %s/%d", o, r.AnswerHash, r.AnswerBytes)
	}
	// The ack freed the conversation: a new task for it is accepted.
	testwait.Eventually(t, waitLong, "conversation free", func() bool {
		raw, _ := json.Marshal(task.Message{TaskID: task.ID("b", "m2"), Bot: "b", MsgID: "m2", Chat: "alice", Question: "and then?"})
		_, err := env.Store.PublishTask(context.Background(), "b", "alice", "m2", raw)
		return err == nil
	})
	// Multi-turn: the second task's prompt saw the first exchange.
	var conv *task.Conversation
	testwait.Eventually(t, waitLong, "both exchanges in the conversation context", func() bool {
		conv, _, _ = task.LoadConversation(context.Background(), env.Store.Context(), jetstream.ConversationKey("b", "alice"))
		return conv != nil && len(conv.Turns) == 4
	})
	if conv.Turns[0].Content != "what is botctl?" || conv.Turns[2].Content != "and then?" || conv.Turns[1].Role != "assistant" {
		t.Fatalf("conversation = %+v", conv)
	}
}

// Output is written coalesced: far fewer writes than deltas. The text in
// progress goes to the progress bucket; the answer, the attempt's last
// write, to the output bucket, and the progress entry is dropped.
func TestOutputIsCoalesced(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	run(t, env.Store, "w1", demo(t, time.Second)) // ~20 deltas
	m := publish(t, env.Store, "m1", "alice", "q")
	w, err := env.Store.Progress().Watch(context.Background(), m.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	writes := 0
	timeout := time.After(waitLong)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case e := <-w.Updates():
			if e != nil {
				writes++
			}
		case <-tick.C:
			if record(t, env.Store, m.TaskID).Exec == task.Succeeded {
				// 1 s at 50 ms per write is at most ~21 writes; without
				// coalescing it would be one per delta (~20 here, far more
				// for a real model), so bound the count.
				if writes < 2 || writes > 30 {
					t.Fatalf("%d writes of the text in progress for a 1 s answer", writes)
				}
				r := record(t, env.Store, m.TaskID)
				o, err := task.GetOutput(context.Background(), env.Store.Output(), m.TaskID)
				if err != nil || o == nil || task.Hash(o.Text) != r.AnswerHash {
					t.Fatalf("the output bucket has %+v (%v), not the recorded answer", o, err)
				}
				testwait.Eventually(t, waitLong, "the progress entry dropped after the answer", func() bool {
					p, err := task.GetOutput(context.Background(), env.Store.Progress(), m.TaskID)
					return p == nil && err == nil
				})
				return
			}
		case <-timeout:
			t.Fatal("never succeeded")
		}
	}
}

// /stop marks the record canceled and announces it: the worker stops at
// once. Without the announcement (a worker that was reconnecting) it still
// stops, from its periodic re-read of the record.
// A /stop ends the run: at once when announced; when the announcement was
// lost (published while the worker's connection was away), at the
// connection's return, or at the next periodic read of the record.
func TestStopCancels(t *testing.T) {
	t.Run("announced", func(t *testing.T) { testStop(t, true, false) })
	t.Run("announcement lost, then a reconnect", func(t *testing.T) { testStop(t, false, true) })
	t.Run("announcement lost", func(t *testing.T) {
		worker.SetCancelCheck(t, 2*time.Second)
		testStop(t, false, false)
	})
}

func testStop(t *testing.T, announce, reconnect bool) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	w := run(t, env.Store, "w1", demo(t, time.Minute))
	m := publish(t, env.Store, "m1", "alice", "long one")
	testwait.Eventually(t, waitLong, "running", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Running })
	start := time.Now()
	lc := task.NewLifecycle(env.Store, "leader", zerolog.Nop())
	if !announce {
		lc = lc.Quiet()
	}
	if _, err := lc.Cancel(context.Background(), m.TaskID, "/stop"); err != nil {
		t.Fatal(err)
	}
	if reconnect {
		time.Sleep(time.Second) // a negative check needs a window: the lost cancel stops nothing
		if w.Busy() == 0 {
			t.Fatal("stopped with no announcement and no reconnect: the test shows nothing")
		}
		if err := env.Conn.ForceReconnect(); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, waitLong, "worker stopped", func() bool { return w.Busy() == 0 })
	t.Logf("stopped %s after the cancel", time.Since(start))
	// Freed: a new task for the conversation is accepted.
	testwait.Eventually(t, waitLong, "conversation free", func() bool {
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
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{TaskMaxDeliver: 3})
	f := &failing{}
	run(t, env.Store, "w1", f)
	m := publish(t, env.Store, "m1", "alice", "q")
	testwait.Eventually(t, waitLong, "failed", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Failed })
	r := record(t, env.Store, m.TaskID)
	if f.calls.Load() != 3 || r.Attempt != 3 || !strings.Contains(r.Error, "last attempt failed") {
		t.Fatalf("calls %d, record %+v", f.calls.Load(), r)
	}
	// The record says failed first; the message goes right after.
	testwait.Eventually(t, waitLong, "conversation free", func() bool { return free(t, env.Store, "alice", "m2") })
}

type refusing struct{}

func (refusing) Name() string { return "refusing" }
func (refusing) Stream(context.Context, ai.Request, func(string) error) error {
	return ai.ErrBadRequest
}

func TestBadRequestIsNotRetried(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{TaskMaxDeliver: 5})
	run(t, env.Store, "w1", refusing{})
	m := publish(t, env.Store, "m1", "alice", "q")
	testwait.Eventually(t, waitLong, "failed", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Failed })
	if r := record(t, env.Store, m.TaskID); r.Attempt != 1 {
		t.Fatalf("attempts = %d, want 1", r.Attempt)
	}
}

// A worker that dies mid-task (its connection gone, no ack): the task is
// redelivered after the ack wait and another worker finishes it; the
// record counts the attempt.
func TestWorkerCrashIsRetriedElsewhere(t *testing.T) {
	t.Parallel()
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
	testwait.Eventually(t, waitLong, "running on doomed", func() bool { return record(t, env.Store, m.TaskID).Node == "doomed" })
	nc.Close() // crash: no ack, no nak, no in-progress

	run(t, env.Store, "survivor", demo(t, 200*time.Millisecond))
	testwait.Eventually(t, waitLong, "succeeded on survivor", func() bool {
		r := record(t, env.Store, m.TaskID)
		return r.Exec == task.Succeeded && r.Node == "survivor"
	})
	if r := record(t, env.Store, m.TaskID); r.Attempt < 2 {
		t.Fatalf("attempt = %d, want ≥ 2", r.Attempt)
	}
}

func TestConfigRequired(t *testing.T) {
	t.Parallel()
	if _, err := worker.New(worker.Config{NodeID: "n"}); err == nil || !strings.Contains(err.Error(), "Backend") {
		t.Fatalf("err = %v", err)
	}
	_ = errors.New
}

// A worker stopped during the queue's last delivery of a task hands it
// back with fresh deliveries (the message requeued): the record says
// queued, and the next worker finishes it. A node stopping is not the
// task's fault.
func TestStopOnFinalDeliveryRequeues(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{TaskMaxDeliver: 1})
	w := run(t, env.Store, "w1", demo(t, time.Minute))
	m := publish(t, env.Store, "m1", "alice", "long one")
	testwait.Eventually(t, waitLong, "running", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Running })
	w.stop()
	if r := record(t, env.Store, m.TaskID); r.Exec != task.Queued {
		t.Fatalf("record after stop on the final delivery = %s %q, want queued", r.Exec, r.Error)
	}
	if free(t, env.Store, "alice", "m2") {
		t.Fatal("the conversation took a new task: the interrupted one left the queue")
	}
	run(t, env.Store, "w2", demo(t, 100*time.Millisecond))
	testwait.Eventually(t, waitLong, "succeeded on w2", func() bool {
		r := record(t, env.Store, m.TaskID)
		return r.Exec == task.Succeeded && r.Node == "w2" && r.Attempt == 2
	})
}

// Requeued task.MaxRequeues times already, a task interrupted on its last
// delivery is failed for good and its conversation freed: nodes that keep
// stopping do not hold a conversation for ever.
func TestStopOnFinalDeliveryRequeuedTooOftenFailsAndFrees(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{TaskMaxDeliver: 1})
	m := publish(t, env.Store, "m1", "alice", "long one")
	for i := range task.MaxRequeues + 1 {
		w := run(t, env.Store, fmt.Sprintf("w%d", i+1), demo(t, time.Minute))
		testwait.Eventually(t, waitLong, fmt.Sprintf("attempt %d running", i+1), func() bool {
			r := record(t, env.Store, m.TaskID)
			return r.Exec == task.Running && r.Attempt == i+1
		})
		w.stop()
	}
	r := record(t, env.Store, m.TaskID)
	if r.Exec != task.Failed || !strings.Contains(r.Error, "last attempt") {
		t.Fatalf("record after the stop on a final delivery requeued %d times = %s %q", task.MaxRequeues, r.Exec, r.Error)
	}
	if !free(t, env.Store, "alice", "m2") {
		t.Fatal("conversation still locked after the final delivery was interrupted")
	}
}

// A worker stopped during an earlier delivery hands the task back: the
// record says queued (nobody runs it), and the next worker finishes it.
func TestStopBeforeFinalDeliveryRequeues(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{TaskMaxDeliver: 3})
	w := run(t, env.Store, "w1", demo(t, time.Minute))
	m := publish(t, env.Store, "m1", "alice", "q")
	testwait.Eventually(t, waitLong, "running", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Running })
	w.stop()
	if r := record(t, env.Store, m.TaskID); r.Exec != task.Queued {
		t.Fatalf("exec after stop = %s, want queued", r.Exec)
	}
	run(t, env.Store, "w2", demo(t, 100*time.Millisecond))
	testwait.Eventually(t, waitLong, "succeeded on w2", func() bool {
		r := record(t, env.Store, m.TaskID)
		return r.Exec == task.Succeeded && r.Node == "w2" && r.Attempt == 2
	})
}

// lastDeliveryRig is a queue of one delivery per task, with the
// lifecycle's MAX_DELIVERIES watch running, and a doomed node's store on a
// connection of its own (closing nc is its kill -9).
func lastDeliveryRig(t *testing.T) (*testenv.JetStream, *jetstream.Store, *nats.Conn) {
	t.Helper()
	opts := jetstream.Options{TaskAckWait: time.Second, TaskMaxDeliver: 1}
	env := testenv.StartJetStream(t, opts)
	lc := task.NewLifecycle(env.Store, "n1", zerolog.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); lc.WatchMaxDeliveries(ctx) }()
	t.Cleanup(func() { cancel(); <-watchDone })
	nc, err := nats.Connect(env.Server.ClientURL(), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := natsjs.New(nc)
	doomed, err := jetstream.Declare(context.Background(), js, opts)
	if err != nil {
		t.Fatal(err)
	}
	return env, doomed, nc
}

// A worker killed (-9) on a task's last delivery: nobody is left to give
// it up. The server's MAX_DELIVERIES advisory is: the lifecycle fails the
// task with the reason and frees the conversation.
func TestKilledOnFinalDeliveryGivenUpByAdvisory(t *testing.T) {
	t.Parallel()
	env, doomedStore, nc := lastDeliveryRig(t)
	run(t, doomedStore, "doomed", demo(t, time.Minute))
	m := publish(t, env.Store, "m1", "alice", "q")
	testwait.Eventually(t, waitLong, "running on doomed", func() bool { return record(t, env.Store, m.TaskID).Node == "doomed" })
	nc.Close() // kill -9: no ack, no nak, no in-progress, and no delivery left

	testwait.Eventually(t, waitLong, "given up", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Failed })
	if r := record(t, env.Store, m.TaskID); !strings.Contains(r.Error, "delivered 1 times") {
		t.Fatalf("reason = %q", r.Error)
	}
	testwait.Eventually(t, waitLong, "conversation free", func() bool { return free(t, env.Store, "alice", "m2") })
}

// A queue message whose record never landed (the leader's write failed,
// and the worker that pulled it died before Start): the advisory gives it
// up through a record opened from the message, so the pusher tells the
// user it failed instead of the message vanishing in silence.
func TestGivenUpByAdvisoryWithoutARecordStillTellsTheUser(t *testing.T) {
	t.Parallel()
	env, doomedStore, nc := lastDeliveryRig(t)
	m := publish(t, env.Store, "m1", "alice", "q")
	batch, err := doomedStore.Workers().Fetch(1, natsjs.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if msg := <-batch.Messages(); msg == nil {
		t.Fatal("the doomed worker pulled nothing")
	}
	nc.Close() // died before Start: no record, no ack, no delivery left

	testwait.Eventually(t, waitLong, "given up with a record", func() bool {
		r, _, err := task.Get(context.Background(), env.Store.Tasks(), m.TaskID)
		return err == nil && r.Exec == task.Failed
	})
	if r := record(t, env.Store, m.TaskID); r.Delivery.Finished() || !strings.Contains(r.Error, "delivered 1 times") {
		t.Fatalf("record: delivery %s, error %q (want a failure the pusher still delivers)", r.Delivery, r.Error)
	}
	ids, err := env.Store.UndeliveredTasks(context.Background(), "b")
	if err != nil || len(ids) != 1 || ids[0] != m.TaskID {
		t.Fatalf("undelivered index %v (%v): the pusher must find the failure to tell", ids, err)
	}
	testwait.Eventually(t, waitLong, "conversation free", func() bool { return free(t, env.Store, "alice", "m2") })
}

// Two attempts of one task at once (a fallback tier and the queue, or a
// redelivery while a stalled worker lives): the later one takes over, the
// earlier one's writes are refused and it stops; the user's text is one
// attempt's, and the conversation context gets the turn once. The slow
// attempt's answer would take a minute: it is still writing when the
// fast one takes over, however slow the machine (a 3 s answer had to
// outlast the wait for its first write and the fast attempt's start).
func TestAttemptsAreFenced(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	slow := run(t, env.Store, "slow", demo(t, time.Minute))
	m := publish(t, env.Store, "m1", "alice", "q")
	testwait.Eventually(t, waitLong, "attempt 1 writing", func() bool { return output(env.Store, m.TaskID).Attempt == 1 && output(env.Store, m.TaskID).Text != "" })

	fast, err := worker.New(worker.Config{NodeID: "fast", Backend: demo(t, 200*time.Millisecond), Store: env.Store, OutputInterval: 50 * time.Millisecond, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := fast.Execute(context.Background(), m, "local"); err != nil {
		t.Fatal(err)
	}
	r := record(t, env.Store, m.TaskID)
	if r.Exec != task.Succeeded || r.Attempt != 2 || r.Node != "fast" {
		t.Fatalf("record = %s attempt %d on %s", r.Exec, r.Attempt, r.Node)
	}
	testwait.Eventually(t, waitLong, "the slow attempt stopped", func() bool { return slow.Busy() == 0 })
	o := answer(env.Store, m.TaskID)
	if o.Attempt != 2 || task.Hash(o.Text) != r.AnswerHash {
		t.Fatalf("output is attempt %d's (%q), the record's answer is attempt 2's", o.Attempt, o.Text)
	}
	// The queue copy was freed when the fallback finished it.
	testwait.Eventually(t, waitLong, "conversation free", func() bool { return free(t, env.Store, "alice", "m2") })
	conv, _, err := task.LoadConversation(context.Background(), env.Store.Context(), jetstream.ConversationKey("b", "alice"))
	if err != nil || len(conv.Turns) != 2 {
		t.Fatalf("conversation context: %+v (%v), want one exchange", conv, err)
	}
}

// Past its execution deadline a task is failed, its conversation freed.
func TestDeadlineFailsTheTask(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	runWith(t, worker.Config{NodeID: "w1", Backend: demo(t, time.Minute), Store: env.Store, Deadline: time.Second})
	m := publish(t, env.Store, "m1", "alice", "q")
	testwait.Eventually(t, waitLong, "failed past the deadline", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Failed })
	if r := record(t, env.Store, m.TaskID); !strings.Contains(r.Error, "deadline") {
		t.Fatalf("reason = %q", r.Error)
	}
	testwait.Eventually(t, waitLong, "conversation free", func() bool { return free(t, env.Store, "alice", "m2") })
}

// Work off the queue (a fixed worker's exec API, the leader's own tier) is
// bounded by the slots like queue work: a full worker refuses at once.
func TestOffQueueWorkBoundedBySlots(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	w, err := worker.New(worker.Config{NodeID: "w1", Slots: 2, Backend: demo(t, time.Minute), Store: env.Store, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range 2 {
		m := task.Message{TaskID: task.ID("b", fmt.Sprint("m", i)), Bot: "b", MsgID: fmt.Sprint("m", i), Chat: fmt.Sprint("c", i), Question: "q"}
		if err := w.Go(ctx, m, "local", &wg); err != nil {
			t.Fatalf("task %d refused with free slots: %v", i, err)
		}
	}
	m := task.Message{TaskID: task.ID("b", "m9"), Bot: "b", MsgID: "m9", Chat: "c9", Question: "q"}
	if err := w.Go(ctx, m, "local", &wg); !errors.Is(err, worker.ErrNoSlot) {
		t.Fatalf("third task on two slots: %v, want ErrNoSlot", err)
	}
	if err := w.Execute(ctx, m, "fixed"); !errors.Is(err, worker.ErrNoSlot) {
		t.Fatalf("Execute on a full worker: %v, want ErrNoSlot", err)
	}
}

// leading is a worker.Leadership a test switches.
type leading struct{ v atomic.Bool }

func (l *leading) LeadsAny() bool { return l.v.Load() }

// While the node leads a bot the worker uses its LeaderSlots (headroom for
// the connection and pusher); once leadership ends, Slots again.
func TestLeaderSlotsWhileLeading(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	l := &leading{}
	l.v.Store(true)
	w, err := worker.New(worker.Config{NodeID: "w1", Slots: 2, LeaderSlots: 1, Leadership: l,
		Backend: demo(t, time.Minute), Store: env.Store, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	msg := func(i int) task.Message {
		return task.Message{TaskID: task.ID("b", fmt.Sprint("m", i)), Bot: "b", MsgID: fmt.Sprint("m", i), Chat: fmt.Sprint("c", i), Question: "q"}
	}
	if err := w.Go(ctx, msg(0), "local", &wg); err != nil {
		t.Fatalf("first task refused while leading: %v", err)
	}
	if err := w.Go(ctx, msg(1), "local", &wg); !errors.Is(err, worker.ErrNoSlot) {
		t.Fatalf("second task on one leader slot: %v, want ErrNoSlot", err)
	}
	l.v.Store(false)
	if err := w.Go(ctx, msg(1), "local", &wg); err != nil {
		t.Fatalf("second task refused once leadership ended (two slots): %v", err)
	}
}

// worker.leader_slots 0: a node leading a bot runs no task, neither off
// the queue nor locally, while a follower on the same queue runs them
// all; LeaderSlotsAll gives the leader every slot.
func TestLeaderWithZeroSlotsRunsNoTask(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	l := &leading{}
	l.v.Store(true)
	leader := runWith(t, worker.Config{NodeID: "leader", Slots: 4, LeaderSlots: 0, Leadership: l, Backend: demo(t, 50*time.Millisecond), Store: env.Store})
	runWith(t, worker.Config{NodeID: "follower", Slots: 4, LeaderSlots: 0, Leadership: &leading{}, Backend: demo(t, 50*time.Millisecond), Store: env.Store})
	var msgs []task.Message
	for i := range 6 {
		msgs = append(msgs, publish(t, env.Store, fmt.Sprint("m", i), fmt.Sprint("c", i), "q"))
	}
	for _, m := range msgs {
		testwait.Eventually(t, waitLong, "task "+m.TaskID+" answered", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
		if r := record(t, env.Store, m.TaskID); r.Node != "follower" || r.Attempt != 1 {
			t.Fatalf("task %s ran on %s (attempt %d), want the follower only", m.TaskID, r.Node, r.Attempt)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	local := task.Message{TaskID: task.ID("b", "local"), Bot: "b", MsgID: "local", Chat: "cl", Question: "q"}
	if err := leader.Go(ctx, local, "local", &wg); !errors.Is(err, worker.ErrNoSlot) {
		t.Fatalf("a local task on a leader with no slots: %v, want ErrNoSlot", err)
	}

	all, err := worker.New(worker.Config{NodeID: "w-all", Slots: 2, LeaderSlots: worker.LeaderSlotsAll, Leadership: l,
		Backend: demo(t, time.Minute), Store: env.Store, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		m := task.Message{TaskID: task.ID("b", fmt.Sprint("a", i)), Bot: "b", MsgID: fmt.Sprint("a", i), Chat: fmt.Sprint("ca", i), Question: "q"}
		if err := all.Go(ctx, m, "local", &wg); err != nil {
			t.Fatalf("task %d of 2 on a leader with every slot: %v", i+1, err)
		}
	}
	if _, err := worker.New(worker.Config{NodeID: "w", LeaderSlots: -2, Backend: demo(t, time.Second), Store: env.Store}); err == nil {
		t.Fatal("LeaderSlots -2 accepted")
	}
}

// blip answers, then takes JetStream away for longer than a request's
// timeout (its NATS server stops and comes back on the same address and
// data, 7 s later): a cluster failing over just as an answer ends.
type blip struct {
	env       *testenv.JetStream
	restarted chan *infra.NATS
}

func (b *blip) Name() string { return "blip" }
func (b *blip) Stream(ctx context.Context, req ai.Request, emit func(string) error) error {
	if err := emit("the answer"); err != nil {
		return err
	}
	addr := strings.TrimPrefix(b.env.Server.ClientURL(), "nats://")
	b.env.Server.Close()
	go func() {
		time.Sleep(7 * time.Second)
		srv, err := infra.StartNATS(infra.NATSConfig{DataDir: b.env.DataDir, Addr: addr, Logger: zerolog.Nop()})
		if err != nil {
			panic(err)
		}
		b.restarted <- srv
	}()
	return nil
}

// An answer finished while JetStream is briefly away is stored once it is
// back, not failed. Off the queue (a fallback tier, which runs exactly
// while JetStream is in trouble) failing it would lose the answer: found
// by the chaos smoke (kill-nats-server), where a task run locally during
// the failover ended "answer not stored".
func TestAnswerStoredAfterJetStreamBlip(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	lc := task.NewLifecycle(env.Store, "leader", zerolog.Nop())
	b := &blip{env: env, restarted: make(chan *infra.NATS, 1)}
	w := runWith(t, worker.Config{NodeID: "w1", Backend: b, Store: env.Store})
	m := task.Message{TaskID: task.ID("b", "m1"), Bot: "b", MsgID: "m1", Chat: "alice", Question: "q", Received: time.Now()}
	if _, err := lc.Open(context.Background(), task.RecordOf(m)); err != nil {
		t.Fatal(err)
	}
	err := w.Execute(context.Background(), m, "local")
	srv := <-b.restarted
	t.Cleanup(srv.Close)
	if err != nil {
		t.Fatalf("execute: %v", err)
	}
	if r := record(t, env.Store, m.TaskID); r.Exec != task.Succeeded {
		t.Fatalf("record %s (%q), want succeeded", r.Exec, r.Error)
	}
	if o := answer(env.Store, m.TaskID); o.Text != "the answer" {
		t.Fatalf("output %q", o.Text)
	}
}

// A task started off the queue (a fallback tier, while the queue was
// away) whose copy the spool then forwarded to the queue: the worker that
// pulls the copy neither runs it a second time nor lets its conversation
// go: it holds the copy until the attempt off the queue ends, then acks
// it. Before, the spool dropped the entry of a task a fallback tier had
// started, and the conversation took a second question while the first
// was still being answered. The answer off the queue ends when the test
// says (a gate), not after a while: a 4 s answer had to outlast the
// test's waits for the copy to be fetched and held.
func TestQueueCopyHeldWhileTaskRunsOffQueue(t *testing.T) {
	t.Parallel()
	offQueue := &recorder{name: "answered off the queue", gate: make(chan struct{})}
	var wg sync.WaitGroup
	defer wg.Wait()
	var once sync.Once
	finish := func() { once.Do(func() { close(offQueue.gate) }) }
	defer finish() // before wg.Wait, when the test ends early
	env, q, m := runOffQueueWithCopy(t, context.Background(), offQueue, &wg)

	// While the answer runs the conversation is taken.
	if free(t, env.Store, "alice", "m2") {
		t.Fatal("a second question was queued while the first ran off the queue")
	}
	finish()
	testwait.Eventually(t, waitLong, "answered off the queue", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
	if r := record(t, env.Store, m.TaskID); r.Attempt != 1 || r.Node != "leader" {
		t.Fatalf("record: attempt %d on %s, want attempt 1 on leader (the copy must not run it again)", r.Attempt, r.Node)
	}
	testwait.Eventually(t, waitLong, "conversation free", func() bool { return free(t, env.Store, "alice", "m3") })
	testwait.Eventually(t, waitLong, "the held copy let go", func() bool { return q.Holding() == 0 })
}

// runOffQueueWithCopy starts a task on a fallback tier (the leader's own
// worker, answering with backend, tracked by wg, on ctx: the leader
// node's), then queues its copy, as the spool's forward does, and
// returns once a queue worker holds the copy.
func runOffQueueWithCopy(t *testing.T, ctx context.Context, backend ai.Backend, wg *sync.WaitGroup) (*testenv.JetStream, running, task.Message) {
	t.Helper()
	env := testenv.StartJetStream(t, jetstream.Options{})
	q := run(t, env.Store, "queue-worker", demo(t, 100*time.Millisecond))
	leader, err := worker.New(worker.Config{NodeID: "leader", Backend: backend, Store: env.Store, OutputInterval: 50 * time.Millisecond, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	m := task.Message{TaskID: task.ID("b", "m1"), Bot: "b", MsgID: "m1", Chat: "alice", Question: "q", Received: time.Now()}
	if err := leader.Go(ctx, m, "local", wg); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitLong, "attempt 1 running off the queue", func() bool {
		r := record(t, env.Store, m.TaskID)
		return r.Exec == task.Running && r.Attempt == 1
	})
	publish(t, env.Store, "m1", "alice", "q") // the spool's copy
	testwait.Eventually(t, waitLong, "the copy held", func() bool { return q.Holding() == 1 })
	return env, q, m
}

// A task running off the queue whose node stops gracefully is not failed:
// the queue's copy (the spool's, forwarded) runs it, and the user gets
// the answer instead of a failure notice.
func TestOffQueueAttemptStoppedWithItsNodeRunsFromTheQueueCopy(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	defer wg.Wait()
	nodeCtx, stopNode := context.WithCancel(context.Background())
	defer stopNode()
	env, _, m := runOffQueueWithCopy(t, nodeCtx, &recorder{name: "never answers", gate: make(chan struct{})}, &wg)
	stopNode()
	wg.Wait()
	testwait.Eventually(t, waitLong, "answered from the queue's copy", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
	if r := record(t, env.Store, m.TaskID); r.Attempt != 2 || r.Node != "queue-worker" {
		t.Fatalf("record: attempt %d on %s, want attempt 2 on queue-worker", r.Attempt, r.Node)
	}
	testwait.Eventually(t, waitLong, "conversation free", func() bool { return free(t, env.Store, "alice", "m2") })
}

// An attempt off the queue that shows no sign of life (its node died with
// it) does not hold the task for ever: past the off-queue silence the
// worker holding the copy runs the task itself.
func TestSilentOffQueueAttemptTakenOver(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	lc := task.NewLifecycle(env.Store, "queue-worker", zerolog.Nop()).WithOffQueueSilence(3 * time.Second)
	runWith(t, worker.Config{NodeID: "queue-worker", Backend: demo(t, 100*time.Millisecond), Store: env.Store, Lifecycle: lc})
	m := task.Message{TaskID: task.ID("b", "m1"), Bot: "b", MsgID: "m1", Chat: "alice", Question: "q", Received: time.Now()}
	dead := task.NewLifecycle(env.Store, "dead-leader", zerolog.Nop())
	if _, _, err := dead.Start(context.Background(), m, "local", 0); err != nil { // started, then the node died
		t.Fatal(err)
	}
	publish(t, env.Store, "m1", "alice", "q")
	testwait.Eventually(t, waitLong, "answered by the queue worker", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
	r := record(t, env.Store, m.TaskID)
	if r.Attempt != 2 || r.Node != "queue-worker" || r.Deliveries != 1 {
		t.Fatalf("record: attempt %d on %s (deliveries %d), want attempt 2 on queue-worker", r.Attempt, r.Node, r.Deliveries)
	}
	// It waited for the silence first: the takeover came after it.
	var took time.Time
	for _, tr := range r.Transitions {
		if tr.Dim == "exec" && tr.To == string(task.Running) && tr.Node == "queue-worker" {
			took = tr.At
		}
	}
	if started := r.Transitions[0].At; took.Sub(started) < 3*time.Second {
		t.Fatalf("taken over %s after the dead attempt began, before the 3s silence", took.Sub(started))
	}
	testwait.Eventually(t, waitLong, "conversation free", func() bool { return free(t, env.Store, "alice", "m2") })
}

// severing answers, then closes the worker's NATS connection: every write
// of the answer and of the record that follows fails at once.
type severing struct{ conn *nats.Conn }

func (severing) Name() string { return "severing" }
func (s severing) Stream(ctx context.Context, req ai.Request, emit func(string) error) error {
	if err := emit("the start"); err != nil {
		return err
	}
	s.conn.Close()
	return emit(" and the rest")
}

// opCounter is a worker.Metrics that counts NATSError calls by operation.
type opCounter struct {
	mu    sync.Mutex
	heard map[string]int
}

func (c *opCounter) NATSError(op string) { c.mu.Lock(); c.heard[op]++; c.mu.Unlock() }

// NATSError hears a running task's writes of its output and record that
// JetStream failed, and nothing of a task that ran with JetStream up (a
// conversation with no context yet is not a failure).
func TestNATSErrorHearsTaskWriteFailures(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	counter := &opCounter{heard: map[string]int{}}
	mu, heard := &counter.mu, counter.heard
	cfg := worker.Config{NodeID: "w1", Store: env.Store, StorePatience: 300 * time.Millisecond, Logger: zerolog.Nop(),
		Metrics: counter}
	lc := task.NewLifecycle(env.Store, "leader", zerolog.Nop())
	open := func(msgid string) task.Message {
		m := task.Message{TaskID: task.ID("b", msgid), Bot: "b", MsgID: msgid, Chat: "alice", Question: "q", Received: time.Now()}
		if _, err := lc.Open(context.Background(), task.RecordOf(m)); err != nil {
			t.Fatal(err)
		}
		return m
	}

	cfg.Backend = demo(t, 200*time.Millisecond)
	up, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Execute(context.Background(), open("m1"), "local"); err != nil {
		t.Fatalf("execute with JetStream up: %v", err)
	}
	mu.Lock()
	if len(heard) != 0 {
		t.Fatalf("NATSError heard %v with JetStream up", heard)
	}
	mu.Unlock()

	cfg.Backend = severing{env.Conn}
	down, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := down.Execute(context.Background(), open("m2"), "local"); err == nil {
		t.Fatal("execute with the connection closed under the answer succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	documented := map[string]bool{"output_write": true, "record_write": true, "record_read": true, "context_read": true, "context_write": true}
	for op := range heard {
		if !documented[op] {
			t.Errorf("NATSError heard op %q, not one a running task documents", op)
		}
	}
	if heard["output_write"] == 0 || heard["record_write"] == 0 {
		t.Fatalf("NATSError heard %v, want output_write (the answer not stored) and record_write (its failure not recorded)", heard)
	}
}

// A message delivered as its worker stops is handed back unrun. On its
// last delivery a nak would spend it, and the MAX_DELIVERIES watch would
// give the task up without it ever running: it is requeued with fresh
// deliveries instead, and the next worker answers it.
func TestLateLastDeliveryIsRequeuedNotGivenUp(t *testing.T) {
	env, doomedStore, _ := lastDeliveryRig(t)
	m := publish(t, env.Store, "m1", "alice", "q")
	batch, err := doomedStore.Workers().Fetch(1, natsjs.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	msg := <-batch.Messages()
	if msg == nil || !doomedStore.FinalDelivery(msg) {
		t.Fatal("the stopping worker pulled no message on its last delivery")
	}
	stopping := run(t, doomedStore, "stopping", demo(t, time.Minute))
	stopping.stop()
	worker.HandBack(stopping.Worker, msg)

	run(t, env.Store, "w2", demo(t, 100*time.Millisecond))
	testwait.Eventually(t, waitLong, "answered by w2", func() bool {
		r, _, err := task.Get(context.Background(), env.Store.Tasks(), m.TaskID)
		return err == nil && r.Exec.Finished()
	})
	if r := record(t, env.Store, m.TaskID); r.Exec != task.Succeeded || r.Node != "w2" {
		t.Fatalf("record %s on %s (%q), want succeeded on w2", r.Exec, r.Node, r.Error)
	}
	testwait.Eventually(t, waitLong, "conversation free", func() bool { return free(t, env.Store, "alice", "m2") })
}
