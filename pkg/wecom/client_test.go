package wecom_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Generous: these tests run on a loaded 2-core CI machine.
const waitLong = 15 * time.Second

type env struct {
	t   *testing.T
	sim *wecomsim.Server
	srv *httptest.Server
	url string
}

func newEnv(t *testing.T, cfg wecomsim.Config) *env {
	t.Helper()
	cfg.Logger = zerolog.Nop()
	sim := wecomsim.New(cfg)
	if err := sim.AddBot("bot1", "s3cret"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() {
		sim.Close()
		srv.Close()
	})
	return &env{t: t, sim: sim, srv: srv, url: "ws" + strings.TrimPrefix(srv.URL, "http") + "/"}
}

func (e *env) config() wecom.Config {
	return wecom.Config{URL: e.url, BotID: "bot1", Secret: "s3cret", Logger: zerolog.Nop(), AckTimeout: 5 * time.Second}
}

func (e *env) dial(cfg wecom.Config, h wecom.Handler) *wecom.Conn {
	e.t.Helper()
	c, err := wecom.Dial(context.Background(), cfg, h)
	if err != nil {
		e.t.Fatalf("dial: %v", err)
	}
	e.t.Cleanup(func() {
		c.Close()
		<-c.Done()
	})
	return c
}

func (e *env) post(user, text string) wecomsim.MessageResult {
	e.t.Helper()
	r, err := e.sim.PostMessage(wecomsim.MessageRequest{BotID: "bot1", UserID: user, Text: text})
	if err != nil {
		e.t.Fatalf("post message: %v", err)
	}
	return r
}

func (e *env) stats() wecomsim.Stats {
	e.t.Helper()
	s, err := e.sim.Stats("bot1")
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

type received struct {
	reqID string
	msg   *wecom.MsgCallback
}

func msgChan(buf int) (chan received, wecom.Handler) {
	ch := make(chan received, buf)
	return ch, wecom.MessageFunc(func(_ *wecom.Conn, reqID string, m *wecom.MsgCallback) {
		ch <- received{reqID, m}
	})
}

// eventFunc is a Handler of events alone.
type eventFunc func(c *wecom.Conn, reqID string, ev *wecom.EventCallback)

func (f eventFunc) Message(*wecom.Conn, string, *wecom.MsgCallback)            {}
func (f eventFunc) Event(c *wecom.Conn, reqID string, ev *wecom.EventCallback) { f(c, reqID, ev) }

// checkFunc is a wecom.Precondition.
type checkFunc func() error

func (f checkFunc) Check() error { return f() }

func recv(t *testing.T, ch chan received) received {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitLong):
		t.Fatal("no callback delivered")
	}
	return received{}
}

func waitDone(t *testing.T, c *wecom.Conn) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(waitLong):
		t.Fatal("connection did not end")
	}
}

func TestMessageAndStreamedReply(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	ch, h := msgChan(1)
	c := e.dial(e.config(), h)
	ctx := context.Background()

	sent := e.post("alice", "what is botctl?")
	if !sent.Delivered {
		t.Fatalf("message not delivered: %+v", sent)
	}
	r := recv(t, ch)
	if r.msg.MsgID != sent.MsgID || r.msg.PlainText() != "what is botctl?" || r.msg.Conversation() != "alice" {
		t.Fatalf("callback = %+v", r.msg)
	}
	if err := c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s1", Content: "thinking"}); err != nil {
		t.Fatal(err)
	}
	if err := c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s1", Content: "thinking… done", Finish: true}); err != nil {
		t.Fatal(err)
	}
	var bot []wecomsim.TranscriptEntry
	for _, m := range e.sim.Transcript("bot1", "alice") {
		if m.From == "bot" {
			bot = append(bot, m)
		}
	}
	if len(bot) != 1 || bot[0].Content != "thinking… done" || !bot[0].Finished || bot[0].ReplyTo != sent.MsgID {
		t.Fatalf("transcript bot entries = %+v", bot)
	}
	if err := c.SendMarkdown(ctx, "alice", 0, "**later**"); err != nil {
		t.Fatal(err)
	}
}

func TestAuthFailureIsTyped(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	cfg := e.config()
	cfg.Secret = "Xq9-not-the-secret"
	_, err := wecom.Dial(context.Background(), cfg, nil)
	if !errors.Is(err, wecom.ErrAuthFailed) {
		t.Fatalf("err = %v, want ErrAuthFailed", err)
	}
	var ae *wecom.AuthError
	if !errors.As(err, &ae) || ae.ErrCode == 0 {
		t.Fatalf("err = %#v, want *AuthError with errcode", err)
	}
	if strings.Contains(err.Error(), cfg.Secret) {
		t.Fatalf("error leaks the secret: %v", err)
	}
	if got := e.stats().AuthFailures; got != 1 {
		t.Fatalf("auth_failures = %d, want 1", got)
	}
}

// A term that ended during the handshake never subscribes: BeforeSubscribe
// refuses after the handshake, and the server sees no subscribe at all.
func TestBeforeSubscribeRefusalSendsNothing(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	cfg := e.config()
	lost := errors.New("term ended")
	cfg.BeforeSubscribe = checkFunc(func() error { return lost })
	if _, err := wecom.Dial(context.Background(), cfg, nil); !errors.Is(err, lost) {
		t.Fatalf("err = %v, want the hook's", err)
	}
	if s := e.stats(); s.Connections != 0 || s.Frames[wecom.CmdSubscribe] != 0 {
		t.Fatalf("a refused dial subscribed: %+v", s)
	}
	calls := 0
	cfg.BeforeSubscribe = checkFunc(func() error { calls++; return nil })
	c, err := wecom.Dial(context.Background(), cfg, nil)
	if err != nil || calls != 1 {
		t.Fatalf("dial with a passing hook: %v (hook called %d times)", err, calls)
	}
	c.Close()
	<-c.Done()
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []wecom.Config{
		{BotID: "b", Secret: "s"},
		{URL: "http://x", BotID: "b", Secret: "s"},
		{URL: "ws://x/", Secret: "s"},
		{URL: "ws://x/", BotID: "b"},
	} {
		if _, err := wecom.Dial(context.Background(), cfg, nil); err == nil {
			t.Errorf("Dial(%+v) accepted an invalid config", cfg)
		}
	}
}

// A second connection kicks the first: the first ends with ReasonKicked and
// its handlers never see another message; the new connection's do.
func TestKickedIsItsOwnCloseReason(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	ch1, h1 := msgChan(10)
	c1 := e.dial(e.config(), h1)
	ch2, h2 := msgChan(10)
	c2 := e.dial(e.config(), h2)

	waitDone(t, c1)
	if c1.Reason() != wecom.ReasonKicked {
		t.Fatalf("reason = %v, want kicked", c1.Reason())
	}
	if !errors.Is(c1.Err(), wecom.ErrClosed) {
		t.Fatalf("Err = %v", c1.Err())
	}
	if k := e.stats().Kicks; k != 1 {
		t.Fatalf("kicks = %d, want 1", k)
	}
	sent := e.post("bob", "after")
	if r := recv(t, ch2); r.msg.MsgID != sent.MsgID {
		t.Fatalf("new connection got %+v", r.msg)
	}
	select {
	case r := <-ch1:
		t.Fatalf("kicked connection's handler got %+v", r.msg)
	default:
	}
	if c2.Reason() != wecom.ReasonNone {
		t.Fatalf("new connection reason = %v", c2.Reason())
	}
}

func TestHeartbeatLost(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	cfg := e.config()
	cfg.HeartbeatInterval = 50 * time.Millisecond
	c := e.dial(cfg, nil)
	if err := e.sim.Fault(wecomsim.FaultRequest{BotID: "bot1", Action: "stall_acks", Seconds: 60}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, c)
	if c.Reason() != wecom.ReasonHeartbeatLost {
		t.Fatalf("reason = %v, want heartbeat_lost (%v)", c.Reason(), c.Err())
	}
}

// Acked pings keep a connection alive well past MaxMissedPings intervals.
func TestHeartbeatAckedKeepsConnection(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	cfg := e.config()
	cfg.HeartbeatInterval = 20 * time.Millisecond
	c := e.dial(cfg, nil)
	testwait.Eventually(t, waitLong, "10 pings", func() bool { return e.stats().Frames[wecom.CmdPing] >= 10 })
	if c.Reason() != wecom.ReasonNone {
		t.Fatalf("connection ended: %v", c.Err())
	}
}

func TestNetworkDropAndCloseByUs(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	c := e.dial(e.config(), nil)
	if err := e.sim.Fault(wecomsim.FaultRequest{BotID: "bot1", Action: "drop"}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, c)
	if c.Reason() != wecom.ReasonNetwork {
		t.Fatalf("reason = %v, want network_error", c.Reason())
	}

	c2 := e.dial(e.config(), nil)
	c2.Close()
	waitDone(t, c2)
	if c2.Reason() != wecom.ReasonClosedByUs {
		t.Fatalf("reason = %v, want closed_by_us", c2.Reason())
	}
	if err := c2.SendMarkdown(context.Background(), "alice", 0, "x"); !errors.Is(err, wecom.ErrClosed) {
		t.Fatalf("send after close: %v, want ErrClosed", err)
	}
}

// Frames of one req_id go one at a time, each after the previous one's ack
// (or ack timeout); another req_id is not held up.
func TestFramesOfOneReqIDAreSerialized(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	ch, h := msgChan(2)
	cfg := e.config()
	cfg.AckTimeout = 3 * time.Second
	cfg.MaxAckTimeouts = 100 // this test is about ordering, not teardown
	c := e.dial(cfg, h)
	e.post("alice", "one")
	e.post("bob", "two")
	a, b := recv(t, ch), recv(t, ch)
	base := e.stats().Frames[wecom.CmdRespondMsg]

	if err := e.sim.Fault(wecomsim.FaultRequest{BotID: "bot1", Action: wecomsim.FaultStallAcks, Seconds: 60}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 3 {
		wg.Go(func() {
			errs <- c.ReplyStream(ctx, a.reqID, wecom.Stream{ID: "sa", Content: strings.Repeat("x", i+1)})
		})
	}
	wg.Go(func() { errs <- c.ReplyStream(ctx, b.reqID, wecom.Stream{ID: "sb", Content: "y"}) })

	// One frame of a's req_id and one of b's go out; the other two of a wait
	// for an ack that is not coming until the 3 s ack timeout.
	sent := func() int64 { return e.stats().Frames[wecom.CmdRespondMsg] - base }
	testwait.Eventually(t, waitLong, "two frames sent", func() bool { return sent() >= 2 })
	time.Sleep(300 * time.Millisecond) // well inside the 3 s ack timeout
	if n := sent(); n != 2 {
		t.Fatalf("%d frames sent while the first of req_id a waits for its ack, want 2", n)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, wecom.ErrAckTimeout) || !errors.Is(err, wecom.ErrAckUnknown) || !wecom.IsConnectionError(err) {
			t.Fatalf("err = %v, want ErrAckTimeout (an unknown outcome, connection-wide)", err)
		}
	}
	if n := sent(); n != 4 {
		t.Fatalf("%d frames sent in all, want 4", n)
	}
}

func TestLimitsCheckedBeforeSending(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	ch, h := msgChan(1)
	c := e.dial(e.config(), h)
	e.post("alice", "q")
	r := recv(t, ch)
	before := e.stats().Frames[wecom.CmdRespondMsg]
	ctx := context.Background()

	big := strings.Repeat("字", wecom.MaxContentBytes/3+1) // 3 bytes each in UTF-8
	if err := c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s", Content: big}); !errors.Is(err, wecom.ErrContentTooLarge) {
		t.Fatalf("oversized content: %v", err)
	}
	if err := c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s", Content: "\xff\xfe"}); !errors.Is(err, wecom.ErrInvalidUTF8) {
		t.Fatalf("invalid UTF-8: %v", err)
	}
	if err := c.ReplyStream(ctx, r.reqID, wecom.Stream{Content: "no id"}); !errors.Is(err, wecom.ErrInvalidFrame) {
		t.Fatalf("stream without id: %v", err)
	}
	if _, err := c.Do(ctx, wecom.CmdUploadMediaChunk, "up_1", map[string]string{"base64_data": strings.Repeat("A", wecom.MaxFrameBytes)}); !errors.Is(err, wecom.ErrFrameTooLarge) {
		t.Fatalf("oversized frame: %v", err)
	}
	if after := e.stats().Frames[wecom.CmdRespondMsg]; after != before {
		t.Fatalf("refused frames reached the server: %d → %d", before, after)
	}
	exact := strings.Repeat("a", wecom.MaxContentBytes)
	if err := c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s", Content: exact, Finish: true}); err != nil {
		t.Fatalf("content of exactly the limit: %v", err)
	}
}

func TestServerErrcodesSurfaceAsAckErrors(t *testing.T) {
	e := newEnv(t, wecomsim.Config{StreamWindow: 300 * time.Millisecond, RateLimit: 3})
	ch, h := msgChan(2)
	c := e.dial(e.config(), h)
	ctx := context.Background()
	e.post("alice", "q1")
	r := recv(t, ch)

	// Stream window: the first frame opens it; after it, updates fail.
	if err := c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s", Content: "a"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // past the 300 ms window
	err := c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s", Content: "ab", Finish: true})
	if wecom.ErrCodeOf(err) != wecom.ErrCodeStreamExpired {
		t.Fatalf("after window: %v, want errcode %d", err, wecom.ErrCodeStreamExpired)
	}

	// Quota: 3 accepted frames per minute per conversation; the 4th is refused.
	for i := range 2 {
		if err := c.SendMarkdown(ctx, "alice", 0, "push"); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	if err := c.SendMarkdown(ctx, "alice", 0, "push"); wecom.ErrCodeOf(err) != wecom.ErrCodeRateLimited {
		t.Fatalf("over quota: %v, want errcode %d", err, wecom.ErrCodeRateLimited)
	}
	// The connection counts it (the half-open observation reads it).
	if v := c.Vitals(); v.RateLimited != 1 {
		t.Fatalf("Vitals.RateLimited = %d after one 45009, want 1", v.RateLimited)
	}

	// A text push is refused.
	e.post("bob", "q2")
	if err := c.SendMessage(ctx, &wecom.SendMsgBody{ChatID: "bob", MsgType: "text", Text: &wecom.TextContent{Content: "x"}}); wecom.ErrCodeOf(err) != wecom.ErrCodeInvalidMsgType {
		t.Fatalf("text push: %v", err)
	}
}

// A req_id is valid only on the connection that received its callback.
func TestReqIDDoesNotSurviveReconnect(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	ch, h := msgChan(1)
	c1 := e.dial(e.config(), h)
	e.post("alice", "q")
	r := recv(t, ch)
	c1.Close()
	waitDone(t, c1)

	c2 := e.dial(e.config(), nil)
	err := c2.ReplyStream(context.Background(), r.reqID, wecom.Stream{ID: "s", Content: "late", Finish: true})
	if wecom.ErrCodeOf(err) != wecom.ErrCodeInvalidReqID {
		t.Fatalf("old req_id on new connection: %v, want errcode %d", err, wecom.ErrCodeInvalidReqID)
	}
	// The answer owed goes out as a proactive push instead.
	if err := c2.SendMarkdown(context.Background(), "alice", wecom.ChatTypeSingle, "late"); err != nil {
		t.Fatal(err)
	}
}

func TestWelcomeWithinWindow(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	evs := make(chan string, 1)
	c := e.dial(e.config(), eventFunc(func(_ *wecom.Conn, reqID string, ev *wecom.EventCallback) {
		if ev.Event.EventType == wecom.EventEnterChat {
			evs <- reqID
		}
	}))
	if _, err := e.sim.PostEvent(wecomsim.EventRequest{BotID: "bot1", UserID: "carol", EventType: wecom.EventEnterChat}); err != nil {
		t.Fatal(err)
	}
	var reqID string
	select {
	case reqID = <-evs:
	case <-time.After(waitLong):
		t.Fatal("no enter_chat event")
	}
	if err := c.ReplyWelcome(context.Background(), reqID, &wecom.WelcomeBody{MsgType: wecom.MsgTypeText, Text: &wecom.TextContent{Content: "你好"}}); err != nil {
		t.Fatal(err)
	}
}

// Each message is handled exactly once across a chain of connections, each
// kicked by the next while messages keep arriving: handlers never stack up,
// and what a kicked connection read before its kick is still handled.
func TestNoMessageHandledByTwoGenerations(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	var mu sync.Mutex
	handled := map[string]int{} // msgid → times handled
	h := wecom.MessageFunc(func(_ *wecom.Conn, _ string, m *wecom.MsgCallback) {
		mu.Lock()
		handled[m.MsgID]++
		mu.Unlock()
	})
	stop := make(chan struct{})
	posted := make(chan []string, 1)
	go func() {
		var ids []string
		for {
			select {
			case <-stop:
				posted <- ids
				return
			default:
			}
			r, err := e.sim.PostMessage(wecomsim.MessageRequest{BotID: "bot1", UserID: "u", Text: "m"})
			if err == nil && r.Delivered {
				ids = append(ids, r.MsgID)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	var conns []*wecom.Conn
	for range 4 {
		conns = append(conns, e.dial(e.config(), h))
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	ids := <-posted
	last := conns[len(conns)-1]
	for _, c := range conns[:len(conns)-1] {
		waitDone(t, c)
		if c.Reason() != wecom.ReasonKicked {
			t.Fatalf("reason = %v, want kicked", c.Reason())
		}
	}
	tail := e.post("u", "last") // reaches the live connection
	testwait.Eventually(t, waitLong, "last message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return handled[tail.MsgID] == 1
	})
	last.Close()
	waitDone(t, last)
	mu.Lock()
	defer mu.Unlock()
	known := map[string]bool{tail.MsgID: true}
	for _, id := range ids {
		known[id] = true
	}
	for id, n := range handled {
		if n != 1 {
			t.Errorf("message %s handled %d times", id, n)
		}
		if !known[id] {
			t.Errorf("handled %s, which the simulator never delivered", id)
		}
	}
	for id := range known {
		if handled[id] == 0 {
			t.Errorf("delivered message %s was never handled", id)
		}
	}
	if len(handled) < 2 {
		t.Fatalf("only %d messages handled", len(handled))
	}
}

// A handler that blocks never starves acks and heartbeats: the reader keeps
// reading while callbacks queue up (below CallbackQueue).
func TestBlockedHandlerDoesNotStarveAcks(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the connection's cleanup waits on Done
	var handled sync.WaitGroup
	cfg := e.config()
	cfg.CallbackQueue = 16
	c := e.dial(cfg, wecom.MessageFunc(func(*wecom.Conn, string, *wecom.MsgCallback) {
		<-release
		handled.Done()
	}))
	const n = 12
	handled.Add(n)
	for i := range n {
		if r := e.post(fmt.Sprintf("u%d", i), "hi"); !r.Delivered {
			t.Fatal("not delivered")
		}
	}
	// The handler is stuck on the first message; a push still gets its ack.
	if err := c.SendMarkdown(context.Background(), "u1", 0, "still here"); err != nil {
		t.Fatalf("send while the handler blocks: %v", err)
	}
	unblock()
	done := make(chan struct{})
	go func() { handled.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitLong):
		t.Fatal("queued callbacks were not all delivered")
	}
	if c.Reason() != wecom.ReasonNone {
		t.Fatalf("connection ended: %v", c.Err())
	}
}

// Send writes the frame and returns without its ack; the frame holds its
// req_id's turn until Wait, whose outcome is Do's (here a timeout: the
// acks are stalled) and the same on a second call.
func TestSendReturnsBeforeTheAckAndHoldsTheTurn(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	ch, h := msgChan(2)
	cfg := e.config()
	cfg.AckTimeout = 3 * time.Second
	cfg.MaxAckTimeouts = 100
	c := e.dial(cfg, h)
	e.post("alice", "one")
	e.post("bob", "two")
	a, b := recv(t, ch), recv(t, ch)
	ctx := context.Background()
	// Acked normally first: Send then Wait is Do.
	p, err := c.SendStream(ctx, b.reqID, wecom.Stream{ID: "sb", Content: "received"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if _, err := c.SendStream(ctx, b.reqID, wecom.Stream{ID: "sb", Content: string([]byte{0xff})}); !errors.Is(err, wecom.ErrInvalidUTF8) {
		t.Fatalf("invalid content: err = %v, want ErrInvalidUTF8 before sending", err)
	}

	base := e.stats().Frames[wecom.CmdRespondMsg]
	sent := func() int64 { return e.stats().Frames[wecom.CmdRespondMsg] - base }
	if err := e.sim.Fault(wecomsim.FaultRequest{BotID: "bot1", Action: wecomsim.FaultStallAcks, Seconds: 60}); err != nil {
		t.Fatal(err)
	}
	p, err = c.SendStream(ctx, a.reqID, wecom.Stream{ID: "sa", Content: "received"})
	if err != nil {
		t.Fatalf("send with acks stalled: %v (it must not wait for the ack)", err)
	}
	testwait.Eventually(t, waitLong, "the frame sent", func() bool { return sent() == 1 })
	next := make(chan error, 1)
	go func() { next <- c.ReplyStream(ctx, a.reqID, wecom.Stream{ID: "sa", Content: "more"}) }()
	time.Sleep(300 * time.Millisecond) // well inside the 3 s ack timeout
	if n := sent(); n != 1 {
		t.Fatalf("%d frames sent while the first of the req_id is not waited for, want 1", n)
	}
	_, err = p.Wait(ctx)
	if !errors.Is(err, wecom.ErrAckTimeout) {
		t.Fatalf("wait = %v, want ErrAckTimeout", err)
	}
	if _, again := p.Wait(ctx); again != err {
		t.Fatalf("second wait = %v, want the first outcome %v", again, err)
	}
	select {
	case err := <-next:
		if !errors.Is(err, wecom.ErrAckUnknown) {
			t.Fatalf("next frame = %v, want an unknown outcome (acks stalled)", err)
		}
	case <-time.After(waitLong):
		t.Fatal("the next frame of the req_id never went after Wait")
	}
	if n := sent(); n != 2 {
		t.Fatalf("%d frames sent in all, want 2", n)
	}
}
