package pusher_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/natscount"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

const waitLong = 30 * time.Second

type rig struct {
	t      *testing.T
	js     *testenv.JetStream
	sim    *wecomsim.Server
	url    string
	conn   *wecom.Conn
	msgs   chan received
	budget *pace.Budget
	term   int64
	stop   func()
	p      *pusher.Pusher
	lc     *task.Lifecycle
	runs   map[string]int // task id → the attempt the rig's "worker" runs
}

type received struct {
	reqID string
	m     *wecom.MsgCallback
}

func newRig(t *testing.T, simCfg wecomsim.Config) *rig {
	t.Helper()
	return newRigOn(t, simCfg, testenv.StartJetStream(t, jetstream.Options{}))
}

// newRigOn is newRig on the store js.
func newRigOn(t *testing.T, simCfg wecomsim.Config, js *testenv.JetStream) *rig {
	t.Helper()
	simCfg.Logger = zerolog.Nop()
	sim := wecomsim.New(simCfg)
	sim.AddBot("b", "s")
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { sim.Close(); srv.Close() })
	r := &rig{t: t, js: js, sim: sim,
		url: "ws" + strings.TrimPrefix(srv.URL, "http") + "/", budget: pace.New(20, time.Minute, nil), runs: map[string]int{}}
	r.lc = task.NewLifecycle(r.js.Store, "n1", zerolog.Nop())
	r.connect(1)
	return r
}

// connect opens a new connection as term `term` (a new leader).
func (r *rig) connect(term int64) { r.dial(term, nil) }

// reconnect replaces the connection (same term) with one whose config
// mutate changes, and returns it.
func (r *rig) reconnect(mutate func(*wecom.Config)) *wecom.Conn {
	r.t.Helper()
	r.conn.Close()
	<-r.conn.Done()
	r.dial(r.term, mutate)
	return r.conn
}

func (r *rig) dial(term int64, mutate func(*wecom.Config)) {
	r.t.Helper()
	r.msgs = make(chan received, 100)
	msgs := r.msgs
	cfg := wecom.Config{URL: r.url, BotID: "b", Secret: "s", Logger: zerolog.Nop()}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := wecom.Dial(context.Background(), cfg,
		wecom.MessageFunc(func(_ *wecom.Conn, reqID string, m *wecom.MsgCallback) { msgs <- received{reqID, m} }))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close(); <-c.Done() })
	r.conn, r.term = c, term
}

func (r *rig) start(cfg pusher.Config) { r.startWith(cfg, nil) }

// failedFunc is a pusher.Health that calls itself.
type failedFunc func(r *task.Record, err error)

func (f failedFunc) DeliveryFailed(r *task.Record, err error) { f(r, err) }

// natsErrorFunc is a pusher.Metrics that hears the store's failures only.
type natsErrorFunc func(op string)

func (natsErrorFunc) PushLag(string, time.Duration) {}
func (f natsErrorFunc) NATSError(op string)         { f(op) }

// startWith starts a pusher after prepare (nil: none) has had it.
func (r *rig) startWith(cfg pusher.Config, prepare func(*pusher.Pusher)) {
	r.t.Helper()
	cfg.Bot, cfg.NodeID, cfg.TermRev, cfg.Conn, cfg.Store, cfg.Budget = "b", "n1", r.term, r.conn, r.js.Store, r.budget
	cfg.Logger = zerolog.Nop()
	if cfg.ScanInterval == 0 {
		cfg.ScanInterval = 100 * time.Millisecond
	}
	p, err := pusher.New(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	if prepare != nil {
		prepare(p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	r.p = p
	r.stop = func() { cancel(); <-done }
	r.t.Cleanup(r.stop)
}

// ask plays the inbound path: a user message, the receipt frame, the record.
func (r *rig) ask(user, text string) *task.Record {
	r.t.Helper()
	return r.askWithFiles(user, text, nil)
}

// askWithFiles is ask of a message that came with files (stored by the
// caller under atts' keys).
func (r *rig) askWithFiles(user, text string, atts []task.Attachment) *task.Record {
	r.t.Helper()
	if _, err := r.sim.PostMessage(wecomsim.MessageRequest{BotID: "b", UserID: user, Text: text}); err != nil {
		r.t.Fatal(err)
	}
	var in received
	select {
	case in = <-r.msgs:
	case <-time.After(waitLong):
		r.t.Fatal("no callback")
	}
	now := time.Now()
	rec := task.New("b", in.m.MsgID, now)
	rec.ReqID, rec.TermRev, rec.Chat, rec.ChatType, rec.User, rec.Question = in.reqID, r.term, user, "single", user, text
	rec.StreamID = "s-" + rec.ID
	rec.Attachments = atts
	if err := r.conn.ReplyStream(context.Background(), in.reqID, wecom.Stream{ID: rec.StreamID, Content: "已收到，正在处理…"}); err != nil {
		r.t.Fatal(err)
	}
	r.budget.Record(user)
	rec.SetDelivery(task.Streaming, "receipt", "n1", now)
	rec.PushedHash, rec.PushedAt, rec.StreamStart = task.Hash("已收到，正在处理…"), now, now
	if _, err := r.lc.Open(context.Background(), rec); err != nil {
		r.t.Fatal(err)
	}
	if r.p != nil {
		r.p.NotifyChat(rec.ID, user)
	}
	return rec
}

// write plays a worker: its attempt's output is text and, when done, the
// answer is complete (written first, then recorded, as a worker does).
func (r *rig) write(id, text string, done bool) {
	r.t.Helper()
	r.writeThinking(id, text, "", "", done)
}

// writeThinking is write with the backend's thinking and tool lines
// (task.Output's Thinking and Tools).
func (r *rig) writeThinking(id, text, thinking, tools string, done bool) {
	r.t.Helper()
	ctx := context.Background()
	attempt := r.runs[id]
	if attempt == 0 {
		rec := r.record(id)
		a, _, err := r.lc.Start(ctx, task.MessageOf(rec), "queue", 1)
		if err != nil {
			r.t.Fatal(err)
		}
		attempt, r.runs[id] = a, a
	}
	w := r.lc.Output(id, "b", attempt)
	w.SetThinking(thinking, tools)
	if err := w.Write(ctx, text); err != nil {
		r.t.Fatal(err)
	}
	if done {
		if err := w.Final(ctx, text); err != nil {
			r.t.Fatal(err)
		}
		if _, err := r.lc.Finish(ctx, id, attempt, text); err != nil {
			r.t.Fatal(err)
		}
		w.Retire(ctx)
	}
}

func (r *rig) record(id string) *task.Record {
	rec, _, err := task.Get(context.Background(), r.js.Store.Tasks(), id)
	if err != nil {
		return &task.Record{}
	}
	return rec
}

func (r *rig) waitDelivery(id string, want task.Delivery) {
	r.t.Helper()
	deadline := time.Now().Add(waitLong)
	for r.record(id).Delivery != want {
		if time.Now().After(deadline) {
			r.t.Fatalf("task %s delivery %s, want %s (reason %q)", id, r.record(id).Delivery, want, r.record(id).DeliveryReason)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *rig) botMessages(chat string) []wecomsim.TranscriptEntry {
	var out []wecomsim.TranscriptEntry
	for _, m := range r.sim.Transcript("b", chat) {
		if m.From == "bot" {
			out = append(out, m)
		}
	}
	return out
}

func (r *rig) stats() wecomsim.Stats {
	s, _ := r.sim.Stats("b")
	return s
}

func TestShortAnswerOneFinishedStream(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{})
	rec := r.ask("alice", "hi")
	r.write(rec.ID, "Hello", false)
	r.write(rec.ID, "Hello, alice.", true)
	r.waitDelivery(rec.ID, task.Delivered)
	bot := r.botMessages("alice")
	if len(bot) != 1 || bot[0].Content != "Hello, alice." || !bot[0].Finished || bot[0].Kind != "stream" {
		t.Fatalf("user sees %+v", bot)
	}
	if s := r.stats(); s.QuotaRejections != 0 || s.InvalidReqIDs != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Idle (the inbound path's prediction of the mutex) says a conversation
// has no task only once the term's rebuild has found every undelivered
// one, and not while a task of it is being delivered: one from before the
// term, named by its record, or one announced with its conversation.
func TestIdleKnowsTheConversationsItDelivers(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	before := r.ask("carol", "asked before the term") // not announced: no pusher yet
	r.start(pusher.Config{})
	testwait.Eventually(t, waitLong, "rebuild done (an unknown conversation idle)", func() bool { return r.p.Idle("dave") })
	if r.p.Idle("carol") {
		t.Fatal("carol's task from before the term: idle")
	}
	rec := r.ask("alice", "hi")
	if r.p.Idle("alice") {
		t.Fatal("alice's task just announced: idle")
	}
	r.write(rec.ID, "Hello, alice.", true)
	r.waitDelivery(rec.ID, task.Delivered)
	testwait.Eventually(t, waitLong, "alice idle after her delivery", func() bool { return r.p.Idle("alice") })
	if r.p.Idle("carol") {
		t.Fatal("carol idle before her delivery")
	}
	r.write(before.ID, "Hello, carol.", true)
	r.waitDelivery(before.ID, task.Delivered)
	testwait.Eventually(t, waitLong, "carol idle after her delivery", func() bool { return r.p.Idle("carol") })
}

// Output written before the output watch's consumer exists still reaches
// the watch: the watch begins where the term began, not where its
// consumer was made. Here the task's first step has read its record
// (queued, no output) before the output is written, so only the watch can
// tell the pusher of it before the record's refresh (30 s); the watch is
// made late on purpose (under load, making its consumer took long enough
// in CI).
func TestOutputWrittenBeforeTheWatchExistsIsShown(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	hold := make(chan struct{})
	r.startWith(pusher.Config{Heartbeat: time.Hour}, func(p *pusher.Pusher) {
		p.HoldWatch(hold)
	})
	testwait.Eventually(t, waitLong, "rebuild done", func() bool { return r.p.Idle("nobody") })
	rec := r.ask("alice", "hi")
	testwait.Eventually(t, waitLong, "the first step read the record", func() bool { return r.p.HasRecord(rec.ID) })
	r.write(rec.ID, "partial", false)
	close(hold)
	// Well inside the record's 30 s refresh: only the watch can have told.
	testwait.Eventually(t, 15*time.Second, "the output written before the watch existed, shown", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content == "partial"
	})
}

// A worker writing many times a second never makes the pusher exceed the
// quota; the first and final frames are never starved. How often progress
// goes (once per progress gap, below the budget's reserve) is the plan's,
// tested on a fake clock: TestProgressIsPacedBelowTheBudget.
func TestQuotaNeverExceeded(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{RateLimit: 30})
	r.budget = pace.New(20, time.Minute, nil)
	r.start(pusher.Config{})
	rec := r.ask("alice", "hi")
	var text strings.Builder
	for i := range 60 { // 6 s of 10 writes a second
		text.WriteString("x")
		r.write(rec.ID, text.String(), false)
		_ = i
		time.Sleep(100 * time.Millisecond)
	}
	r.write(rec.ID, text.String()+" done", true)
	r.waitDelivery(rec.ID, task.Delivered)
	if s := r.stats(); s.QuotaRejections != 0 {
		t.Fatalf("quota rejections: %d", s.QuotaRejections)
	}
	if bot := r.botMessages("alice"); bot[0].Content != text.String()+" done" || !bot[0].Finished {
		t.Fatalf("final = %+v", bot[0])
	}
}

// A long answer with a short window: the stream is closed before its
// window ends with a note, then the full text is pushed, split correctly.
func TestWindowTruncatesThenPushesSplit(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{StreamWindow: 4 * time.Second})
	r.start(pusher.Config{StreamWindow: 4 * time.Second, Margin: time.Second})
	rec := r.ask("alice", "long")
	para := strings.Repeat("段", 3000) // 9000 bytes
	full := para + "\n\n" + para + "\n\n" + para + "\n\nend"
	r.write(rec.ID, para, false)
	r.waitDelivery(rec.ID, task.Truncated)
	r.write(rec.ID, full, true)
	r.waitDelivery(rec.ID, task.Delivered)

	bot := r.botMessages("alice")
	if len(bot) < 3 || bot[0].Kind != "stream" || !bot[0].Finished || bot[0].Expired || !strings.Contains(bot[0].Content, "完整内容稍后") {
		t.Fatalf("stream = %+v", bot[0])
	}
	var pushed []string
	for _, m := range bot[1:] {
		if m.Kind != "markdown" || len(m.Content) > wecom.MaxContentBytes {
			t.Fatalf("push %+v", m)
		}
		pushed = append(pushed, m.Content)
	}
	if got := unlabel(t, pushed); got != full {
		t.Fatalf("pushed parts do not rebuild the answer (%d parts, %d bytes vs %d)", len(pushed), len(got), len(full))
	}
	if s := r.stats(); s.ExpiredUpdates != 0 || s.QuotaRejections != 0 {
		t.Fatalf("stats %+v", s)
	}
	if rec := r.record(rec.ID); rec.PushedParts != len(pushed) {
		t.Fatalf("pushed_parts = %d", rec.PushedParts)
	}
}

// The leader changes mid-answer: the new leader's pusher finishes the
// answer by push (the old req_id is dead on the new connection), once.
func TestFailoverMidStreamCompletesOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{})
	rec := r.ask("alice", "hi")
	r.write(rec.ID, "half of it", false)
	testwait.Eventually(t, waitLong, "the progress frame", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content == "half of it"
	})
	r.stop() // the leader dies
	r.connect(2)
	r.write(rec.ID, "half of it, and the rest.", true)
	r.start(pusher.Config{}) // the new leader's first scan finds the task
	r.waitDelivery(rec.ID, task.Delivered)
	bot := r.botMessages("alice")
	var finals int
	for _, m := range bot {
		if strings.Contains(m.Content, "and the rest.") {
			finals++
		}
	}
	if finals != 1 {
		t.Fatalf("the complete answer appears %d times: %+v", finals, bot)
	}
	if s := r.stats(); s.InvalidReqIDs != 0 {
		t.Fatalf("the new leader tried the old req_id: %+v", s)
	}
	if r.p.Stats().RebuiltNum != 1 {
		t.Fatalf("rebuilt = %d", r.p.Stats().RebuiltNum)
	}
	if ids, err := r.js.Store.UndeliveredTasks(context.Background(), "b"); err != nil || len(ids) != 0 {
		t.Fatalf("undelivered index after delivery: %v %v", ids, err)
	}
}

// Acks stall: the final frame's outcome is unknown (no ack to trust), so
// the record never claims delivery on it; repeated timeouts tear the
// connection down (not the task's fault: no delivery attempt is spent);
// the next term pushes the answer and only then records it delivered.
func TestAckStallNeverCreditedAndCostsNoAttempt(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	c := r.reconnect(func(c *wecom.Config) { c.AckTimeout = 300 * time.Millisecond })
	r.start(pusher.Config{})
	rec := r.ask("alice", "hi")
	r.sim.Fault(wecomsim.FaultRequest{BotID: "b", Action: "stall_acks", Seconds: 60})
	r.write(rec.ID, "answer", true)
	// The final frame goes into the stall, or is held once an ack is
	// overdue (TestNoFinalFrameIntoAStalledLink); either way the health
	// monitor's unanswered probe tears the connection down.
	testwait.Eventually(t, waitLong, "a frame unacked or held", func() bool { return c.Vitals().Unanswered > 0 || r.p.Stats().Stalled > 0 })
	if err := c.Probe(context.Background(), 0); !errors.Is(err, wecom.ErrAckTimeout) {
		t.Fatalf("probe of the stalled link: %v", err)
	}
	c.CloseUnhealthy(errors.New("probe unanswered"))
	<-c.Done()
	got := r.record(rec.ID)
	if got.Delivery == task.Delivered || got.PushAttempts != 0 {
		t.Fatalf("after the stall: delivery %s, push attempts %d (want not delivered, 0 attempts)", got.Delivery, got.PushAttempts)
	}
	r.stop()
	r.sim.Fault(wecomsim.FaultRequest{BotID: "b", Action: "clear"})
	r.connect(2)
	r.start(pusher.Config{})
	r.waitDelivery(rec.ID, task.Delivered)
	var seen bool
	for _, m := range r.botMessages("alice") {
		seen = seen || m.Content == "answer"
	}
	if !seen {
		t.Fatalf("user never got the answer: %+v", r.botMessages("alice"))
	}
}

func TestSplit(t *testing.T) {
	t.Parallel()
	for _, tc := range splitSeeds { // FuzzSplit's, which checks more
		parts := pusher.Split(tc.text, tc.limit)
		for _, p := range parts {
			if len(p) > tc.limit || !strings.Contains(tc.text, p) {
				t.Fatalf("Split(%q, %d) = %q", tc.text, tc.limit, parts)
			}
		}
	}
	if got := pusher.Split("a\n\nb\n\nc", 4); len(got) != 2 || got[0] != "a" || got[1] != "b\n\nc" {
		t.Fatalf("paragraph split = %q", got)
	}
}

// Nothing new for a while: the user sees the content so far with a
// status line.
func TestHeartbeatStatusLine(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{Heartbeat: 4 * time.Second})
	rec := r.ask("alice", "slow one")
	r.write(rec.ID, "first thoughts", false)
	deadline := time.Now().Add(waitLong)
	for {
		bot := r.botMessages("alice")
		if len(bot) == 1 && strings.HasPrefix(bot[0].Content, "first thoughts") && strings.Contains(bot[0].Content, "仍在处理中") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat line: %+v", bot)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.write(rec.ID, "first thoughts, then the answer.", true)
	r.waitDelivery(rec.ID, task.Delivered)
	if bot := r.botMessages("alice"); bot[0].Content != "first thoughts, then the answer." {
		t.Fatalf("final = %q", bot[0].Content)
	}
}

// A task waiting for a worker (every slot busy) tells the user it is
// queued, not that it is being answered; once it runs, the usual line.
func TestQueuedStatusLine(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{Heartbeat: 4 * time.Second})
	rec := r.ask("alice", "waiting one")
	testwait.Eventually(t, waitLong, "queued line", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && strings.Contains(bot[0].Content, "排队中")
	})
	r.write(rec.ID, "now running", false)
	testwait.Eventually(t, waitLong, "progress without the queued line", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && strings.HasPrefix(bot[0].Content, "now running") && !strings.Contains(bot[0].Content, "排队中")
	})
}

// The watermark is written only past the output of delivered tasks, and a
// new term's pusher resumes after it.
func TestWatermarkAfterDelivery(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{})
	done := r.ask("alice", "a")
	r.write(done.ID, "answer a", true)
	r.waitDelivery(done.ID, task.Delivered)
	open := r.ask("bob", "b")
	r.write(open.ID, "part of b", false)
	wm := func() pusher.Watermark {
		e, err := r.js.Store.Watermarks().Get(context.Background(), jetstream.BotKey("b"))
		if err != nil {
			return pusher.Watermark{}
		}
		var w pusher.Watermark
		json.Unmarshal(e.Value(), &w)
		return w
	}
	// The revision of the task's last event in the watched bucket (the
	// progress bucket): its text in progress, or its deletion by the
	// attempt's last write.
	outRev := func(id string) uint64 {
		ctx := context.Background()
		bucket := r.js.Store.Names().ProgressBucket
		st, err := r.js.Store.JetStream().Stream(ctx, "KV_"+bucket)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetLastMsgForSubject(ctx, "$KV."+bucket+"."+id)
		if err != nil {
			t.Fatal(err)
		}
		return m.Sequence
	}
	deadline := time.Now().Add(waitLong)
	for wm().OutputRev < outRev(done.ID) {
		if time.Now().After(deadline) {
			t.Fatalf("watermark %d never passed the delivered task's output %d", wm().OutputRev, outRev(done.ID))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if w := wm(); w.OutputRev >= outRev(open.ID) {
		t.Fatalf("watermark %d covers output %d of a task still being delivered", w.OutputRev, outRev(open.ID))
	}
	r.write(open.ID, "all of b", true)
	r.waitDelivery(open.ID, task.Delivered)
}

// A previous leader sent a final frame but died before recording it: the
// new leader counts the case and still makes sure the user has the answer.
func TestAmbiguousFinalCountedAndDelivered(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	rec := r.ask("alice", "q")
	r.write(rec.ID, "the answer", true)
	if _, err := r.lc.FinalIntent(context.Background(), rec.ID); err != nil {
		t.Fatal(err)
	}
	r.conn.Close()
	<-r.conn.Done()
	r.connect(2)
	r.start(pusher.Config{})
	r.waitDelivery(rec.ID, task.Delivered)
	if n := r.p.Stats().Ambiguous; n != 1 {
		t.Fatalf("ambiguous = %d, want 1", n)
	}
	var got bool
	for _, m := range r.botMessages("alice") {
		got = got || m.Content == "the answer"
	}
	if !got {
		t.Fatalf("user never got the answer: %+v", r.botMessages("alice"))
	}
}

// An answer owed by push past the replay expiry is not sent late: its
// delivery fails for good, and Config.Health hears it (a person is told).
func TestAnswerPastReplayExpiryIsNotSentLate(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	failed := make(chan *task.Record, 1)
	rec := r.ask("alice", "old")
	r.write(rec.ID, "an answer nobody waits for any more", true)
	// The pusher comes back a day later (its clock: the bot was away).
	r.start(pusher.Config{Now: func() time.Time { return time.Now().Add(25 * time.Hour) },
		// The first call is kept; another must not block the pusher.
		Health: failedFunc(func(rec *task.Record, err error) {
			select {
			case failed <- rec:
			default:
			}
		})})
	r.waitDelivery(rec.ID, task.DeliveryFailed)
	got := r.record(rec.ID)
	if !strings.HasPrefix(got.DeliveryReason, task.ExpiredPrefix) {
		t.Fatalf("reason %q", got.DeliveryReason)
	}
	select {
	case f := <-failed:
		if f.ID != rec.ID {
			t.Fatalf("DeliveryFailed for %s", f.ID)
		}
	case <-time.After(waitLong):
		t.Fatal("DeliveryFailed not called")
	}
	for _, m := range r.botMessages("alice") {
		if m.Kind == "markdown" {
			t.Fatalf("an expired answer was pushed: %+v", m)
		}
	}
}

// A task refused late as busy (forwarded from a spool after an outage, it
// found the conversation's earlier task still running) is answered with
// the busy reply, not the failure notice; pushed under a later term, the
// message quotes the question it is about (a push replies to nothing).
func TestLateBusyRefusalPushedAsBusyReplyQuotingTheQuestion(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	rec := r.ask("alice", "the second\nquestion")
	r.connect(2) // the outage: a new term
	if _, err := r.lc.Refused(context.Background(), task.MessageOf(rec), "busy: the earlier question was still running", true); err != nil {
		t.Fatal(err)
	}
	r.start(pusher.Config{BusyNote: "BUSY: ask again later", FailedNote: "FAILED"})
	r.waitDelivery(rec.ID, task.Delivered)
	pushed := r.pushed("alice")
	if len(pushed) != 1 || pushed[0] != "> the second question\n\nBUSY: ask again later" {
		t.Fatalf("pushed %q, want one busy reply quoting the question", pushed)
	}
}

// A refusal whose words the user is owed (why the message's files were
// not taken, the connection closed before the reply) is pushed with those
// words, not the failure notice.
func TestRefusalOwedIsPushedInItsOwnWords(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	rec := r.ask("alice", "look at this file")
	r.connect(2) // the connection that read it closed: a new term
	if _, err := r.lc.RefusedSaying(context.Background(), task.MessageOf(rec), "FILES: the store is full"); err != nil {
		t.Fatal(err)
	}
	r.start(pusher.Config{BusyNote: "BUSY", FailedNote: "FAILED"})
	r.waitDelivery(rec.ID, task.Delivered)
	pushed := r.pushed("alice")
	if len(pushed) != 1 || pushed[0] != "> look at this file\n\nFILES: the store is full" {
		t.Fatalf("pushed %q, want the refusal's words quoting the question", pushed)
	}
}

// A task nobody announced to the pusher (the core NATS notice lost while
// the connection reconnected; a refusal has no output to watch) is found
// by the resync of the undelivered index and delivered, in this term.
// Counted once: the warm-up task, delivered while a resync read the index
// (it leaves the index, then the active set), is not put back and counted
// (it was, under load: "resynced 2, want 1").
func TestResyncFindsATaskNeverAnnounced(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{ResyncEvery: 300 * time.Millisecond, BusyNote: "BUSY: ask again later"})
	// A first task, announced and delivered: the pusher is past its
	// rebuild (which would otherwise find the next one: a flaky pass).
	warm := r.ask("bob", "announced")
	if _, err := r.lc.Refused(context.Background(), task.MessageOf(warm), "busy: the earlier question was still running", true); err != nil {
		t.Fatal(err)
	}
	r.waitDelivery(warm.ID, task.Delivered)
	p := r.p
	r.p = nil // ask tells the pusher when it runs: not this time
	rec := r.ask("alice", "never announced")
	r.p = p
	if _, err := r.lc.Quiet().Refused(context.Background(), task.MessageOf(rec), "busy: the earlier question was still running", true); err != nil {
		t.Fatal(err)
	}
	r.waitDelivery(rec.ID, task.Delivered)
	if n := r.p.Stats().Resynced; n != 1 {
		t.Fatalf("resynced %d, want 1", n)
	}
}

// No frame goes into a link whose acks are overdue: WeCom may apply a
// frame it never acks, so a final frame sent then has an unknown outcome
// and is pushed again (the user sees the answer twice). Held, it goes
// once the link acks again: one answer.
func TestNoFinalFrameIntoAStalledLink(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	c := r.reconnect(func(c *wecom.Config) { c.AckTimeout, c.MaxAckTimeouts = 300*time.Millisecond, 100 })
	r.start(pusher.Config{})
	rec := r.ask("alice", "hi")
	r.waitDelivery(rec.ID, task.Streaming)
	r.sim.Fault(wecomsim.FaultRequest{BotID: "b", Action: "stall_acks", Seconds: 60})
	// Some frame finds the stall first (here a push to another user).
	if err := c.SendMarkdown(context.Background(), "bob", 1, "x"); !errors.Is(err, wecom.ErrAckTimeout) {
		t.Fatalf("push into the stall: %v", err)
	}
	r.write(rec.ID, "the answer", true)
	testwait.Eventually(t, waitLong, "the final frame held", func() bool { return r.p.Stats().Stalled > 0 })
	time.Sleep(time.Second)
	for _, m := range r.botMessages("alice") {
		if strings.Contains(m.Content, "the answer") {
			t.Fatalf("a frame was sent into the stalled link: %+v", m)
		}
	}
	r.sim.Fault(wecomsim.FaultRequest{BotID: "b", Action: "clear"})
	if err := c.Probe(context.Background(), time.Second); err != nil {
		t.Fatalf("probe after the stall: %v", err)
	}
	r.waitDelivery(rec.ID, task.Delivered)
	time.Sleep(500 * time.Millisecond)
	k := 0
	for _, m := range r.botMessages("alice") {
		if strings.Contains(m.Content, "the answer") && (m.Finished || m.Kind == "markdown") {
			k++
		}
	}
	if k != 1 {
		t.Fatalf("the answer reached the user %d times: %+v", k, r.botMessages("alice"))
	}
}

// Metrics.NATSError hears of the store failing under the pusher, and of nothing
// while it works: a whole delivery with JetStream up is heard by no one
// (a key not found at term start is not a failure); with the NATS
// connection gone mid-answer, the next step's record read is.
//
// How soon depends on whether the pusher had read the running record
// before the close: if not, the next step reads it and fails at once
// (0.2-0.5 s for the whole test, 38 runs under a CPU hog); if so, the
// record is cached and the read comes after the next progress frame's
// record write (at most ShownWriteEvery, 10 s, after the last one) fails
// and drops the cache: 9.2 s from the close, measured with a 1 s pause
// before it. waitLong (30 s) bounds the gap between two ops heard, so that
// slow path keeps a 3x margin whatever the load.
func TestNATSErrorHearsStoreFailuresOnly(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	ops := make(chan string, 1024)
	// A short heartbeat: an open stream is stepped every few hundred ms,
	// new output or not.
	r.start(pusher.Config{Heartbeat: 300 * time.Millisecond, Metrics: natsErrorFunc(func(op string) {
		select {
		case ops <- op:
		default:
		}
	})})
	rec := r.ask("alice", "hi")
	r.write(rec.ID, "Hello", false)
	r.write(rec.ID, "Hello, alice.", true)
	r.waitDelivery(rec.ID, task.Delivered)
	select {
	case op := <-ops:
		t.Fatalf("NATSError heard %q with JetStream up", op)
	default:
	}

	rec = r.ask("bob", "still there?")
	r.write(rec.ID, "Working on it", false)
	r.js.Conn.Close()
	known := map[string]bool{"record_read": true, "record_write": true, "output_read": true, "output_status": true, "output_watch": true,
		"watermark_read": true, "watermark_write": true}
	for {
		select {
		case op := <-ops:
			if !known[op] {
				t.Fatalf("NATSError heard op %q, not one the pusher documents", op)
			}
			if op == "record_read" {
				return
			}
		case <-time.After(waitLong):
			t.Fatal("NATSError heard no record read with the NATS connection closed mid-answer")
		}
	}
}

// A running answer's output versions and the paced waits between its
// frames step the task from its cached record: its record is read a
// handful of times, not once per version (each read of an R3 bucket is a
// JetStream API request to its leader). The progress still reaches the
// user, and the ending (announced) is read afresh and delivered.
func TestRunningTaskIsNotReadPerOutputVersion(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{})
	rec := r.ask("alice", "hi")
	r.write(rec.ID, "v0", false) // started: the record's one unannounced change
	reads := r.reads("BOTCTL_TASKS")
	text := "v0"
	for i := range 40 { // 4 s at 10 versions a second: past one progress gap
		text = fmt.Sprintf("%s %d", text, i)
		r.write(rec.ID, text, false)
		time.Sleep(100 * time.Millisecond)
	}
	testwait.Eventually(t, waitLong, "the newest progress shown", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content == text && !bot[0].Finished
	})
	n := reads.Load()
	if n > 8 {
		t.Fatalf("the record was read %d times for 40 output versions", n)
	}
	// The ending: the worker's Finish reads the record once; its notice
	// carries the record, so the pusher reads it no more.
	reads.Reset()
	r.write(rec.ID, text+" done", true)
	testwait.Eventually(t, waitLong, "the final frame", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content == text+" done" && bot[0].Finished
	})
	if n := reads.Load(); n > 1 {
		t.Fatalf("%d record reads for the ending: the Finish's and %d more", n, n-1)
	}
	r.waitDelivery(rec.ID, task.Delivered)
	t.Logf("%d record reads for 40 output versions", n)
}

// reads counts the requests (API reads of the buckets: direct gets, with
// or without a key in the subject, and gets through the stream's leader)
// that the store's connection (the pusher's and the rig's worker's)
// sends, in the order it sent them (natscount): a read made before a
// Reset is never counted after it.
func (r *rig) reads(buckets ...string) *natscount.Counter {
	r.t.Helper()
	var subjects []string
	for _, b := range buckets {
		subjects = append(subjects, "$JS.API.DIRECT.GET.KV_"+b, "$JS.API.DIRECT.GET.KV_"+b+".>", "$JS.API.STREAM.MSG.GET.KV_"+b)
	}
	return natscount.New(r.t, r.js.Conn, r.js.Conn, subjects, nil)
}

// A running task whose worker has not written yet is not read: its first
// version comes by the watch, and a read of the two output buckets before
// it finds nothing (at the ramp's load nine answers in ten began with that
// pair of reads). Here the pusher first meets the task running (its
// rebuild at start), steps it a few times, and the first version, watched,
// is shown with no output read at all.
func TestRunningTaskWithNothingWrittenIsNotRead(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	rec := r.ask("alice", "hi") // no pusher yet: its rebuild finds the task
	ctx := context.Background()
	attempt, _, err := r.lc.Start(ctx, task.MessageOf(r.record(rec.ID)), "queue", 1)
	if err != nil {
		t.Fatal(err)
	}
	r.runs[rec.ID] = attempt
	records := r.reads("BOTCTL_TASKS")
	outputs := r.reads("BOTCTL_OUTPUT", "BOTCTL_PROGRESS")
	r.start(pusher.Config{}) // steps every 100 ms
	testwait.Eventually(t, waitLong, "the pusher's read of the running task's record", func() bool { return records.Load() > 0 })
	time.Sleep(500 * time.Millisecond) // a few steps of the running task, nothing written
	r.write(rec.ID, "v0", false)
	testwait.Eventually(t, waitLong, "the first version shown", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content == "v0"
	})
	if n := outputs.Load(); n > 0 {
		t.Fatalf("%d reads of the output buckets before the task's first version", n)
	}
}

// A notice that comes late, after the delivery, with the record as it
// was when the answer finished, sends nothing again: neither when the
// task is gone from the active set nor when something (here, an output
// write seen by the watch) put it back.
func TestLateNoticeSendsNothingTwice(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	notices, err := r.js.Conn.SubscribeSync(r.js.Store.Names().NoticeSubject("b"))
	if err != nil {
		t.Fatal(err)
	}
	r.js.Conn.Flush()
	r.start(pusher.Config{})
	rec := r.ask("alice", "hi")
	r.write(rec.ID, "Hello", false)
	r.write(rec.ID, "Hello, alice.", true)
	r.waitDelivery(rec.ID, task.Delivered)
	var finished *nats.Msg
	for finished == nil {
		m, err := notices.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal("no notice of the ending")
		}
		if _, nr, _ := task.NoticeOf(m); nr != nil && nr.Exec == task.Succeeded {
			finished = m
		}
	}
	before := r.stats().Frames[wecom.CmdRespondMsg]
	resend := func() {
		m := nats.NewMsg(finished.Subject)
		m.Data, m.Header = finished.Data, finished.Header
		if err := r.js.Conn.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	resend()
	// Back in the active set by a watched output write of the same
	// attempt, then the stale notice again.
	if err := r.lc.Output(rec.ID, "b", r.runs[rec.ID]).Write(context.Background(), "Hello, alice."); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	resend()
	time.Sleep(2 * time.Second) // twenty scans at 100 ms: a negative check needs a window
	if after := r.stats().Frames[wecom.CmdRespondMsg]; after != before {
		t.Fatalf("%d frames sent after the delivery", after-before)
	}
	if bot := r.botMessages("alice"); len(bot) != 1 || !bot[0].Finished {
		t.Fatalf("user sees %+v", bot)
	}
	if got := r.record(rec.ID); got.Delivery != task.Delivered || got.FinalPending {
		t.Fatalf("record after the late notices: %s, final pending %v", got.Delivery, got.FinalPending)
	}
}

// A notice for a task id that has no record (a stray announcement, a
// task whose record never landed) is not stepped every second for ever:
// after a while the pusher drops it from the active set (issue 25 item
// 10), and the bot's real tasks are unaffected.
func TestNoticeOfAnUnknownTaskIsDropped(t *testing.T) {
	pusher.SetUnknownRecordFor(t, 2*time.Second)
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{})
	rec := r.ask("alice", "hi")
	r.write(rec.ID, "Hello, alice.", true)
	r.waitDelivery(rec.ID, task.Delivered) // the pusher runs: its notice subscription too
	testwait.Eventually(t, waitLong, "alice's task out of the active set", func() bool { return r.p.Stats().Active == 0 })
	m := nats.NewMsg(r.js.Store.Names().NoticeSubject("b"))
	m.Data = []byte("t_nobody_has_this_one")
	if err := r.js.Conn.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitLong, "the unknown task in the active set", func() bool { return r.p.Stats().Active == 1 })
	testwait.Eventually(t, waitLong, "the unknown task dropped", func() bool { return r.p.Stats().Active == 0 })
	rec = r.ask("bob", "hi")
	r.write(rec.ID, "Hello, bob.", true)
	r.waitDelivery(rec.ID, task.Delivered)
}

// An answer that ends while the NATS connection is away loses its notice
// (core NATS): after the reconnect, the pusher reads every active task's
// record again, so the final frame goes at once instead of at the
// record's refresh (30 s). Before, the last frames of answers that ended
// during a NATS server's freeze reached users 17-23 s late.
func TestEndingWhoseNoticeWasLostIsShownAfterAReconnect(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{})
	rec := r.ask("alice", "hi")
	r.write(rec.ID, "v0", false)
	testwait.Eventually(t, waitLong, "the first progress frame", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content == "v0"
	})
	// The ending, announced to nobody: as if the notice was published
	// while the pusher's connection was reconnecting. Its text is the one
	// shown, so no progress step (whose record write would find the
	// ending) runs either.
	if _, err := r.lc.Quiet().Finish(context.Background(), rec.ID, r.runs[rec.ID], "v0"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // several scans: none steps the task
	if bot := r.botMessages("alice"); len(bot) != 1 || bot[0].Finished {
		t.Fatalf("the stream finished without a notice or a reconnect (%+v): the test shows nothing", bot)
	}
	if err := r.js.Conn.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	// Well under the record's refresh: without the reconnect's reads the
	// final frame waits for it.
	testwait.Eventually(t, 12*time.Second, "the final frame after the reconnect", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Finished
	})
	r.waitDelivery(rec.ID, task.Delivered)
	if n := r.p.Stats().Reconnects; n < 1 {
		t.Fatalf("reconnects %d, want at least 1", n)
	}
	// The output watch, made again, follows new output.
	next := r.ask("bob", "and now?")
	r.write(next.ID, "w0", false)
	r.write(next.ID, "w0 w1", true)
	testwait.Eventually(t, waitLong, "the next answer", func() bool {
		bot := r.botMessages("bob")
		return len(bot) > 0 && bot[len(bot)-1].Content == "w0 w1" && bot[len(bot)-1].Finished
	})
}

// Progress frames are written to the record every ShownWriteEvery, not
// each: the frames between are kept and go with the next write, so the
// record, once delivered, counts every frame the user was sent.
func TestProgressFramesAreNotEachWrittenAndNoneIsLost(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{})
	rec := r.ask("alice", "hi")
	r.write(rec.ID, "v", false) // started: the worker's last record write until the end
	// The record's writes, every one the store's connection sent before
	// Load counted (natscount); the frames read after it.
	writes := natscount.New(t, r.js.Conn, r.js.Conn, []string{"$KV.BOTCTL_TASKS." + rec.ID}, nil)
	text := "v"
	for i := 0; r.p.Stats().Frames < 5; i++ { // five progress frames
		if i > 600 {
			t.Fatalf("%d progress frames in a minute", r.p.Stats().Frames)
		}
		text = fmt.Sprintf("%s %d", text, i)
		r.write(rec.ID, text, false)
		time.Sleep(100 * time.Millisecond)
	}
	n := int64(writes.Load())
	frames := r.p.Stats().Frames
	if n >= frames {
		t.Fatalf("%d record writes for %d progress frames: each written", n, frames)
	}
	r.write(rec.ID, text+" done", true)
	r.waitDelivery(rec.ID, task.Delivered)
	// The receipt (the rig's, not counted in the record's sends) and the
	// pusher's frames, the final one included.
	if got, sent := int64(len(r.record(rec.ID).RecentSends)), r.p.Stats().Frames; got != sent {
		t.Fatalf("the delivered record counts %d sends; the pusher sent %d frames", got, sent)
	}
	t.Logf("%d record writes for %d progress frames", n, frames)
}

// A read no server answers (its bucket's stream has no leader: every NATS
// server restarted at once, and they are still electing) ends after
// ReadTimeout, and the next step reads again: the task's frames wait for
// the bucket, not for the rest of StepTimeout (30 s).
func TestUnansweredReadHoldsNoStep(t *testing.T) {
	t.Parallel()
	bucket := testenv.StartBucketFault(t)
	nc, store := bucket.Store(t, bucket.URL, jetstream.Options{})
	r := newRigOn(t, wecomsim.Config{}, &testenv.JetStream{Conn: nc, Store: store})
	r.start(pusher.Config{})
	rec := r.ask("alice", "hi")
	r.write(rec.ID, "v0", false)
	testwait.Eventually(t, waitLong, "the first progress frame", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content == "v0"
	})
	// The task bucket stops answering, and a reconnect has the pusher
	// read every active task's record again, as when the servers restart.
	bucket.Fail(t, store.Names().TasksBucket)
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitLong, "the reconnect heard", func() bool { return r.p.Stats().Reconnects > 0 })
	time.Sleep(2 * time.Second) // the fault's length is the point: the step's read is sent, unanswered
	bucket.Heal(t)
	r.write(rec.ID, "v0 v1", false)
	// Well under StepTimeout: an unbounded read holds the step that long.
	testwait.Eventually(t, 15*time.Second, "the new text shown once the bucket answers", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content == "v0 v1"
	})
}

// A scan looks at the tasks that changed, not at every active one: with
// 20 quiet streams in the set, the ending of one costs a few looks, where
// every scan used to walk all 20 (at 10,000 conversations that walk, up
// to 20 times a second, was 14-17 % of the leader's CPU). No tick here
// (ScanInterval an hour): each task reaches the pusher by its first
// version (the watch; see askUnannounced), and the steps after those
// frames wait the hour.
func TestScanLooksOnlyAtChangedTasks(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{ScanInterval: time.Hour})
	const n = 20
	var ids []string
	for i := range n {
		user := fmt.Sprintf("u%d", i)
		rec := r.askUnannounced(user, "hi")
		r.write(rec.ID, "v0 "+user, false)
		ids = append(ids, rec.ID)
	}
	for i := range n {
		user := fmt.Sprintf("u%d", i)
		testwait.Eventually(t, waitLong, "the first version of "+user, r.lastFrameIs(user, "v0 "+user))
	}
	before := r.p.Looks()
	r.write(ids[0], "v1 u0", true)
	r.waitDelivery(ids[0], task.Delivered)
	if bot := r.botMessages("u0"); bot[len(bot)-1].Content != "v1 u0" {
		t.Fatalf("u0's last frame %q, want the answer", bot[len(bot)-1].Content)
	}
	if looks := r.p.Looks() - before; looks >= n {
		t.Fatalf("%d looks at tasks for one ending among %d quiet streams: the scans walked the whole set", looks, n)
	}
}

// lastFrameIs reports whether the last frame user got shows text.
func (r *rig) lastFrameIs(user, text string) func() bool {
	return func() bool {
		bot := r.botMessages(user)
		return len(bot) > 0 && bot[len(bot)-1].Content == text
	}
}

// askUnannounced is ask without the inbound path's announcement to the
// running pusher, once its rebuild is done: the task reaches it by the
// watch, with its first version, so its first step finds that version.
func (r *rig) askUnannounced(user, text string) *task.Record {
	r.t.Helper()
	p := r.p
	testwait.Eventually(r.t, waitLong, "the pusher's rebuild", func() bool { return p.Idle("nobody") })
	r.p = nil
	defer func() { r.p = p }()
	return r.ask(user, text)
}

// A frame the pace holds back goes when its wait ends, with no tick to
// find it (ScanInterval an hour) and nothing else arriving: the scan
// sleeps until the earliest wait ends. The task reaches the pusher by
// its first version (askUnannounced), written at once after the receipt,
// so the step finds the version and the pace holds it about 3 s.
func TestHeldFrameGoesWhenItsWaitEnds(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{ScanInterval: time.Hour})
	rec := r.askUnannounced("alice", "hi")
	r.write(rec.ID, "v0", false)
	testwait.Eventually(t, waitLong, "the version the pace held", r.lastFrameIs("alice", "v0"))
}
