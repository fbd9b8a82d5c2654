package jetstream

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// fetchOne pulls the next task from the workers consumer, failing the test
// if none arrives within a generous wait.
func fetchOne(t *testing.T, st *Store) natsjs.Msg {
	t.Helper()
	batch, err := st.Workers().Fetch(1, natsjs.FetchMaxWait(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got natsjs.Msg
	for m := range batch.Messages() {
		got = m
	}
	if err := batch.Error(); err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatal("no task delivered within 20s")
	}
	return got
}

// assertOnlyBusy fails unless err is ErrConversationBusy and nothing else
// a caller acts on.
func assertOnlyBusy(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrConversationBusy) {
		t.Fatalf("error = %v, want ErrConversationBusy", err)
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTaskRejected) {
		t.Fatalf("busy error also matches ErrUnavailable or ErrTaskRejected: %v", err)
	}
}

func assertUnavailable(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error = %v, want ErrUnavailable", err)
	}
	if errors.Is(err, ErrConversationBusy) || errors.Is(err, ErrTaskRejected) {
		t.Fatalf("unavailable error also matches ErrConversationBusy or ErrTaskRejected: %v", err)
	}
}

func TestPublishTaskQueues(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{})

	bot, conv := "wx.bot-1", "group chat *> 42" // ids a subject cannot hold as they are
	res, err := st.PublishTask(ctx, bot, conv, "msg-1", []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if res != (PublishResult{Seq: 1}) {
		t.Fatalf("PublishTask = %+v, want seq 1, not a duplicate", res)
	}
	m := fetchOne(t, st)
	if string(m.Data()) != "hello" || m.Headers().Get(natsjs.MsgIDHeader) != "msg-1" {
		t.Fatalf("delivered %q with msgid %q", m.Data(), m.Headers().Get(natsjs.MsgIDHeader))
	}
	gotBot, gotConv, err := st.ParseTaskSubject(m.Subject())
	if err != nil || gotBot != bot || gotConv != conv {
		t.Fatalf("ParseTaskSubject(%q) = %q, %q, %v", m.Subject(), gotBot, gotConv, err)
	}
}

// The duplicate window makes dispatch idempotent: a repeated msgid is
// acknowledged as a duplicate, whether its task is still queued (this is
// not "busy") or already done.
func TestPublishDuplicate(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{})

	if _, err := st.PublishTask(ctx, "bot", "alice", "m1", []byte("a")); err != nil {
		t.Fatal(err)
	}
	res, err := st.PublishTask(ctx, "bot", "alice", "m1", []byte("a"))
	if err != nil {
		t.Fatalf("repeat while queued: %v, want a duplicate ack", err)
	}
	if !res.Duplicate {
		t.Fatalf("repeat while queued: %+v, want Duplicate", res)
	}
	t.Logf("duplicate ack while queued: %+v", res)

	// Done: ack removes the task and frees the conversation.
	m := fetchOne(t, st)
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	res, err = st.PublishTask(ctx, "bot", "alice", "m1", []byte("a"))
	if err != nil || !res.Duplicate {
		t.Fatalf("repeat after done: %+v, %v; want Duplicate (not queued twice)", res, err)
	}
	info, err := st.TaskStream().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Fatalf("task stream holds %d messages, want 0: a duplicate was queued", info.State.Msgs)
	}
	// A new msgid is a new task.
	if res, err := st.PublishTask(ctx, "bot", "alice", "m2", nil); err != nil || res.Duplicate {
		t.Fatalf("new msgid: %+v, %v", res, err)
	}
}

// The conversation mutex: the server refuses a second task for a busy
// conversation with err_code 10077 and code 503, and PublishTask reports
// ErrConversationBusy, never ErrUnavailable.
func TestPublishBusyConversation(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{})

	if _, err := st.PublishTask(ctx, "bot", "alice", "m1", nil); err != nil {
		t.Fatal(err)
	}
	_, err := st.PublishTask(ctx, "bot", "alice", "m2", nil)
	assertOnlyBusy(t, err)
	var apiErr *natsjs.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("busy error %v carries no *jetstream.APIError", err)
	}
	if apiErr.ErrorCode != 10077 || apiErr.Code != 503 || apiErr.Description != "maximum messages per subject exceeded" {
		t.Fatalf("server's refusal = %+v, want err_code 10077, code 503, maximum messages per subject exceeded", apiErr)
	}
	t.Logf("busy: %v", err)

	// Other conversations, and the same user with another bot, are free.
	if _, err := st.PublishTask(ctx, "bot", "bob", "m3", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PublishTask(ctx, "bot2", "alice", "m4", nil); err != nil {
		t.Fatal(err)
	}
	// Still busy while a worker runs it; free once it is acked.
	m := fetchOne(t, st)
	if _, err := st.PublishTask(ctx, "bot", "alice", "m5", nil); !errors.Is(err, ErrConversationBusy) {
		t.Fatalf("publish while running: %v, want ErrConversationBusy", err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PublishTask(ctx, "bot", "alice", "m5", nil); err != nil {
		t.Fatalf("publish after ack: %v", err)
	}
}

// With the server down, PublishTask reports ErrUnavailable: after its
// context's deadline while the client buffers for a reconnect, at once
// when buffering is off; and on a closed connection.
func TestPublishUnavailable(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	_, jsNoBuf := connect(t, srv, nats.ReconnectBufSize(-1))
	ctx := ctxT(t)
	st := declare(t, js, Options{})
	stNoBuf := declare(t, jsNoBuf, Options{})
	if _, err := st.PublishTask(ctx, "bot", "alice", "m1", nil); err != nil {
		t.Fatal(err)
	}

	srv.stop()

	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := st.PublishTask(pctx, "bot", "alice", "m2", nil) // busy, were the server up
	assertUnavailable(t, err)
	t.Logf("server down, reconnect buffer on: %v", err)

	start := time.Now()
	_, err = stNoBuf.PublishTask(ctx, "bot", "bob", "m3", nil)
	assertUnavailable(t, err)
	t.Logf("server down, reconnect buffer off: %v (after %s)", err, time.Since(start))

	st.JetStream().Conn().Close()
	_, err = st.PublishTask(ctx, "bot", "carol", "m4", nil)
	assertUnavailable(t, err)
	t.Logf("connection closed: %v", err)
}

// A server without the stream (not declared yet, or deleted) has no
// responder for task subjects: ErrUnavailable, so the task is kept.
func TestPublishNoStream(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{})
	if err := js.DeleteStream(ctx, st.Names().TaskStream); err != nil {
		t.Fatal(err)
	}
	_, err := st.PublishTask(ctx, "bot", "alice", "m1", nil)
	assertUnavailable(t, err)
	if !errors.Is(err, natsjs.ErrNoStreamResponse) {
		t.Fatalf("error = %v, want it to wrap jetstream.ErrNoStreamResponse", err)
	}
}

func TestPublishRejected(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{})
	_, err := st.PublishTask(ctx, "bot", "alice", "", nil)
	if !errors.Is(err, ErrTaskRejected) {
		t.Fatalf("empty msgid: %v, want ErrTaskRejected", err)
	}
	_, err = st.PublishTask(ctx, "bot", "alice", "m1", make([]byte, 2<<20)) // over max_payload
	if !errors.Is(err, ErrTaskRejected) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("2 MiB task: %v, want ErrTaskRejected only", err)
	}
	// A cancelled caller is neither: it gave up.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = st.PublishTask(cctx, "bot", "alice", "m2", nil)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrConversationBusy) {
		t.Fatalf("cancelled context: %v, want context.Canceled only", err)
	}
}

// classify on errors the server gives for other reasons under the same
// err_code 10077 and code 503.
func TestClassify(t *testing.T) {
	api := func(code int, errCode natsjs.ErrorCode, desc string) error {
		return fmt.Errorf("nats: %w", &natsjs.APIError{Code: code, ErrorCode: errCode, Description: desc})
	}
	expired, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"per-subject limit", api(503, 10077, "maximum messages per subject exceeded"), ErrConversationBusy},
		{"store closed", api(503, 10077, "store is closed"), ErrUnavailable},
		{"stream full", api(503, 10077, "maximum messages exceeded"), ErrUnavailable},
		{"too large", api(503, 10077, "message too large"), ErrTaskRejected},
		{"no quorum", api(503, 10008, "JetStream system temporarily unavailable"), ErrUnavailable},
		{"not leader", api(500, 10009, "JetStream cluster can not handle request"), ErrUnavailable},
		{"wrong stream", api(400, 10060, "expected stream does not match"), ErrTaskRejected},
		// The same msgid's earlier publish is still being stored (its
		// proposal in flight, e.g. on a server cut off from its cluster):
		// whether it lands is not known yet.
		{"same msgid in process", api(409, 10158, "duplicate message id is in process"), ErrUnavailable},
		{"timeout", context.DeadlineExceeded, ErrUnavailable},
		{"nats timeout", nats.ErrTimeout, ErrUnavailable},
		{"no responders", natsjs.ErrNoStreamResponse, ErrUnavailable},
		{"closed", nats.ErrConnectionClosed, ErrUnavailable},
		{"reconnecting", nats.ErrReconnectBufExceeded, ErrUnavailable},
		{"bad ack", natsjs.ErrInvalidJSAck, ErrUnavailable},
		{"max payload", nats.ErrMaxPayload, ErrTaskRejected},
	} {
		got := classify(expired, tc.err)
		for _, s := range []error{ErrConversationBusy, ErrUnavailable, ErrTaskRejected} {
			if errors.Is(got, s) != (s == tc.want) {
				t.Errorf("%s: classify(%v) = %v, want only %v", tc.name, tc.err, got, tc.want)
			}
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("%s: classify dropped the cause: %v", tc.name, got)
		}
	}
}

// A task nacked TaskMaxDeliver times is not delivered again but stays in
// the work queue, and its conversation stays busy. GiveUp frees it.
func TestMaxDeliverLocksConversationUntilGiveUp(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{TaskMaxDeliver: 3})

	if _, err := st.PublishTask(ctx, "bot", "alice", "m1", nil); err != nil {
		t.Fatal(err)
	}
	var last natsjs.Msg
	for i := 1; i <= 3; i++ {
		last = fetchOne(t, st)
		if got, want := st.FinalDelivery(last), i == 3; got != want {
			t.Fatalf("delivery %d: FinalDelivery = %v, want %v", i, got, want)
		}
		if err := last.Nak(); err != nil {
			t.Fatal(err)
		}
	}
	// No fourth delivery...
	batch, err := st.Workers().Fetch(1, natsjs.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		t.Fatalf("delivered after MaxDeliver: %s", m.Subject())
	}
	// ...yet the task stays and the conversation is locked.
	info, err := st.TaskStream().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("task stream holds %d messages after MaxDeliver, want 1", info.State.Msgs)
	}
	_, err = st.PublishTask(ctx, "bot", "alice", "m2", nil)
	assertOnlyBusy(t, err)

	// nats.go will not send Term for a nacked message; GiveUp still frees
	// the conversation, and has done so when it returns.
	if err := last.Term(); !errors.Is(err, natsjs.ErrMsgAlreadyAckd) {
		t.Fatalf("Term after Nak: %v, want ErrMsgAlreadyAckd (client-side)", err)
	}
	if err := st.GiveUp(ctx, last, "failed 3 times: backend error"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PublishTask(ctx, "bot", "alice", "m2", nil); err != nil {
		t.Fatalf("publish after GiveUp: %v", err)
	}
	// GiveUp twice is harmless.
	if err := st.GiveUp(ctx, last, "again"); err != nil {
		t.Fatalf("second GiveUp: %v", err)
	}
	if _, err := st.PublishTask(ctx, "bot", "alice", "m3", nil); !errors.Is(err, ErrConversationBusy) {
		t.Fatalf("second GiveUp removed the new task: publish = %v", err)
	}
}

// GiveUp on a delivery still in time (a worker deciding a task is hopeless).
func TestGiveUpInTime(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{})
	if _, err := st.PublishTask(ctx, "bot", "alice", "m1", nil); err != nil {
		t.Fatal(err)
	}
	m := fetchOne(t, st)
	if err := st.GiveUp(ctx, m, "canceled by user"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PublishTask(ctx, "bot", "alice", "m2", nil); err != nil {
		t.Fatalf("publish after GiveUp: %v", err)
	}
}

// Server fact: Term removes a task from the work queue even after its
// deliveries reached MaxDeliver, if it reaches the server (here sent by
// hand, since nats.go refuses after a Nak). The removal is asynchronous.
func TestLateTermRemovesStuckTask(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	nc, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{TaskMaxDeliver: 1})
	if _, err := st.PublishTask(ctx, "bot", "alice", "m1", nil); err != nil {
		t.Fatal(err)
	}
	m := fetchOne(t, st)
	if err := m.Nak(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PublishTask(ctx, "bot", "alice", "m2", nil); !errors.Is(err, ErrConversationBusy) {
		t.Fatalf("after the last Nak: %v, want ErrConversationBusy", err)
	}
	if err := nc.Publish(m.Reply(), []byte("+TERM stuck")); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 20*time.Second, "removed by the late Term", func() bool {
		info, err := st.TaskStream().Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
}

// ReleaseConversation frees a conversation whose task nobody holds.
func TestReleaseConversation(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{TaskMaxDeliver: 1})

	if n, err := st.ReleaseConversation(ctx, "bot", "alice", "nothing there"); err != nil || n != 0 {
		t.Fatalf("release of a free conversation = %d, %v", n, err)
	}
	if _, err := st.PublishTask(ctx, "bot", "a.l*ce", "m1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PublishTask(ctx, "bot", "bob", "m2", nil); err != nil {
		t.Fatal(err)
	}
	fetchOne(t, st) // delivered once, then its worker dies
	n, err := st.ReleaseConversation(ctx, "bot", "a.l*ce", "operator: tasks cancel")
	if err != nil || n != 1 {
		t.Fatalf("release = %d, %v; want 1", n, err)
	}
	if _, err := st.PublishTask(ctx, "bot", "a.l*ce", "m3", nil); err != nil {
		t.Fatalf("publish after release: %v", err)
	}
	// Bob's task is untouched.
	if _, err := st.PublishTask(ctx, "bot", "bob", "m4", nil); !errors.Is(err, ErrConversationBusy) {
		t.Fatalf("bob after releasing alice: %v, want ErrConversationBusy", err)
	}
}

// Requeue puts a task on its last delivery back with fresh deliveries:
// same subject, body and headers, the conversation still taken by it, and
// a second Requeue of the same message stores nothing more.
func TestRequeueGivesFreshDeliveries(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{TaskMaxDeliver: 1})

	if _, err := st.PublishTask(ctx, "bot", "alice", "m1", []byte(`{"task_id":"t1"}`)); err != nil {
		t.Fatal(err)
	}
	last := fetchOne(t, st)
	if !st.FinalDelivery(last) {
		t.Fatal("not the last delivery")
	}
	res, err := st.Requeue(ctx, last)
	if err != nil || res.Duplicate {
		t.Fatalf("Requeue: %+v %v", res, err)
	}
	_, err = st.PublishTask(ctx, "bot", "alice", "m2", nil)
	assertOnlyBusy(t, err)
	if again, err := st.Requeue(ctx, last); err != nil || !again.Duplicate {
		t.Fatalf("second Requeue: %+v %v, want a duplicate", again, err)
	}
	info, err := st.TaskStream().Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("task stream holds %d messages (%v), want 1", info.State.Msgs, err)
	}

	fresh := fetchOne(t, st)
	meta, err := fresh.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if meta.NumDelivered != 1 || meta.Sequence.Stream != res.Seq || fresh.Subject() != last.Subject() ||
		string(fresh.Data()) != `{"task_id":"t1"}` || fresh.Headers().Get(nats.MsgIdHdr) != "m1#requeued-1" {
		t.Fatalf("requeued message: delivered %d, seq %d (want %d), subject %s, data %s, headers %v",
			meta.NumDelivered, meta.Sequence.Stream, res.Seq, fresh.Subject(), fresh.Data(), fresh.Headers())
	}
}
