package wecom_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
)

func (e *env) fault(req wecomsim.FaultRequest) {
	e.t.Helper()
	req.BotID = "bot1"
	if err := e.sim.Fault(req); err != nil {
		e.t.Fatalf("fault %s: %v", req.Action, err)
	}
}

// A progress frame times out; its ack (accepted) comes late, while the final
// frame is in flight; the final frame is refused (846608: its window has
// passed). The late acceptance must not be taken for the final frame's: the
// final frame's outcome is unknown, never "delivered".
func TestLateAckIsNotCreditedToTheNextFrame(t *testing.T) {
	e := newEnv(t, wecomsim.Config{StreamWindow: 500 * time.Millisecond})
	ch, h := msgChan(1)
	cfg := e.config()
	cfg.AckTimeout = 2 * time.Second
	c := e.dial(cfg, h)
	e.post("alice", "q")
	r := recv(t, ch)
	ctx := context.Background()

	// Every ack 3 s late: longer than the 2 s ack timeout, shorter than two.
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultLateAcks, Seconds: 60, DelaySeconds: 3})
	err := c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s", Content: "progress"})
	if !errors.Is(err, wecom.ErrAckTimeout) {
		t.Fatalf("progress frame: %v, want ErrAckTimeout", err)
	}
	// Sent after the 500 ms window: refused, its refusal acked 3 s later;
	// the progress frame's late "ok" arrives about 1 s after it is sent.
	err = c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s", Content: "final", Finish: true})
	if err == nil {
		t.Fatal("final frame reported accepted: the progress frame's late ack was credited to it")
	}
	if !errors.Is(err, wecom.ErrAckUnknown) || wecom.ErrCodeOf(err) != -1 || !wecom.IsConnectionError(err) {
		t.Fatalf("final frame: %v, want ErrAckUnknown without an errcode", err)
	}
	if tr := e.sim.Transcript("bot1", "alice"); len(tr) != 2 || tr[1].Finished || tr[1].Content != "progress" {
		t.Fatalf("transcript = %+v, want the refused final not applied", tr)
	}

	// Once every owed ack has come, acks are matched cleanly again: the
	// final frame, sent once more, gets its own refusal. (Until the final
	// frame's own late ack is read, a new frame is still ambiguous.)
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultClear})
	testwait.Eventually(t, waitLong, "both late acks sent", func() bool { return e.stats().LateAcks == 2 })
	testwait.Eventually(t, waitLong, "a clean answer for the final frame", func() bool {
		err = c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s", Content: "final", Finish: true})
		return !errors.Is(err, wecom.ErrAckUnknown)
	})
	if wecom.ErrCodeOf(err) != wecom.ErrCodeStreamExpired || wecom.IsConnectionError(err) {
		t.Fatalf("final frame after the late acks: %v, want errcode %d", err, wecom.ErrCodeStreamExpired)
	}
	if c.Reason() != wecom.ReasonNone {
		t.Fatalf("connection ended: %v", c.Err())
	}
}

// The same with an accepted final frame: the progress frame's late ack
// must not make the final one look accepted before its own ack comes, and
// the final frame's own ack must not be credited to the frame after it.
func TestLateAckOfFinalIsNotCreditedToAPush(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	ch, h := msgChan(1)
	cfg := e.config()
	cfg.AckTimeout = 2 * time.Second
	c := e.dial(cfg, h)
	e.post("alice", "q")
	r := recv(t, ch)
	ctx := context.Background()

	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultLateAcks, Seconds: 60, DelaySeconds: 3})
	if err := c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s", Content: "progress"}); !errors.Is(err, wecom.ErrAckTimeout) {
		t.Fatalf("progress frame: %v, want ErrAckTimeout", err)
	}
	if err := c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s", Content: "final", Finish: true}); !errors.Is(err, wecom.ErrAckUnknown) {
		t.Fatalf("final frame: %v, want ErrAckUnknown", err)
	}
	// Applied all the same: "unknown" means confirm another way.
	if tr := e.sim.Transcript("bot1", "alice"); len(tr) != 2 || !tr[1].Finished || tr[1].Content != "final" {
		t.Fatalf("transcript = %+v", tr)
	}
	// A proactive push has its own req_id: its ack is its own, late or not.
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultClear})
	if err := c.SendMarkdown(ctx, "alice", 0, "full answer"); err != nil {
		t.Fatalf("push: %v", err)
	}
}

// stall_acks for longer than the ack timeout, mid-traffic: the first
// timeouts are connection errors, and after MaxAckTimeouts in a row the
// connection closes itself with ReasonAckTimeouts, so Done fires and the
// election loop can reconnect.
func TestRepeatedAckTimeoutsCloseTheConnection(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	ch, h := msgChan(10)
	cfg := e.config()
	cfg.AckTimeout = 300 * time.Millisecond
	cfg.MaxAckTimeouts = 3
	c := e.dial(cfg, h)
	ctx := context.Background()
	e.post("alice", "q")
	r := recv(t, ch)
	if err := c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s", Content: "a"}); err != nil {
		t.Fatal(err)
	}

	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultStallAcks, Seconds: 60})
	for i := range 2 {
		err := c.SendMarkdown(ctx, "alice", 0, fmt.Sprintf("push %d", i))
		if !errors.Is(err, wecom.ErrAckTimeout) || !wecom.IsConnectionError(err) {
			t.Fatalf("push %d: %v, want ErrAckTimeout", i, err)
		}
		if c.Reason() != wecom.ReasonNone {
			t.Fatalf("closed after %d timeouts: %v", i+1, c.Err())
		}
		// Callbacks still arrive during the stall and are handled.
		e.post("alice", "more")
		recv(t, ch)
	}
	if err := c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s", Content: "ab"}); !wecom.IsConnectionError(err) {
		t.Fatalf("third frame: %v, want a connection error", err)
	}
	waitDone(t, c)
	if c.Reason() != wecom.ReasonAckTimeouts {
		t.Fatalf("reason = %v (%v), want ack_timeouts", c.Reason(), c.Err())
	}
	if err := c.SendMarkdown(ctx, "alice", 0, "after"); !errors.Is(err, wecom.ErrClosed) || !wecom.IsConnectionError(err) {
		t.Fatalf("send after close: %v, want ErrClosed", err)
	}
}

// Any ack in between resets the count: timeouts that are not in a row do
// not close the connection.
func TestAckResetsTheTimeoutCount(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	cfg := e.config()
	cfg.AckTimeout = 300 * time.Millisecond
	cfg.MaxAckTimeouts = 2
	c := e.dial(cfg, nil)
	e.post("alice", "q")
	ctx := context.Background()
	for i := range 3 {
		e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultStallAcks, Seconds: 60})
		if err := c.SendMarkdown(ctx, "alice", 0, "lost"); !errors.Is(err, wecom.ErrAckTimeout) {
			t.Fatalf("round %d: %v, want ErrAckTimeout", i, err)
		}
		e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultClear})
		if err := c.SendMarkdown(ctx, "alice", 0, "ok"); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	if c.Reason() != wecom.ReasonNone {
		t.Fatalf("connection ended: %v", c.Err())
	}
}

// 846609 on a reply: the socket is open but no longer subscribed. The
// error is connection-wide and the connection closes itself.
func TestNotSubscribedClosesTheConnection(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	ch, h := msgChan(1)
	c := e.dial(e.config(), h)
	e.post("alice", "q")
	r := recv(t, ch)
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultUnsubscribe})
	err := c.ReplyStream(context.Background(), r.reqID, wecom.Stream{ID: "s", Content: "x", Finish: true})
	if wecom.ErrCodeOf(err) != wecom.ErrCodeNotSubscribed || !wecom.IsConnectionError(err) {
		t.Fatalf("reply: %v, want errcode %d", err, wecom.ErrCodeNotSubscribed)
	}
	waitDone(t, c)
	if c.Reason() != wecom.ReasonNotSubscribed {
		t.Fatalf("reason = %v (%v), want not_subscribed", c.Reason(), c.Err())
	}
}

// 846609 on a heartbeat closes the connection too: no reply needed.
func TestNotSubscribedPingClosesTheConnection(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	cfg := e.config()
	cfg.HeartbeatInterval = 50 * time.Millisecond
	c := e.dial(cfg, nil)
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultUnsubscribe})
	waitDone(t, c)
	if c.Reason() != wecom.ReasonNotSubscribed {
		t.Fatalf("reason = %v (%v), want not_subscribed", c.Reason(), c.Err())
	}
}

// Only an authentication errcode at subscribe is ErrAuthFailed; any other
// refusal is retryable, and a retry after it succeeds.
func TestSubscribeRefusedIsRetryable(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	for _, code := range []int{wecom.ErrCodeCommandConflict, wecom.ErrCodeSystemBusy, wecom.ErrCodeTransient1} {
		e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultRefuseSubscribe, Seconds: 60, ErrCode: code})
		_, err := wecom.Dial(context.Background(), e.config(), nil)
		if errors.Is(err, wecom.ErrAuthFailed) {
			t.Fatalf("errcode %d: %v is ErrAuthFailed", code, err)
		}
		var se *wecom.SubscribeError
		if !errors.Is(err, wecom.ErrSubscribeRefused) || !errors.As(err, &se) || se.ErrCode != code || !wecom.IsConnectionError(err) {
			t.Fatalf("errcode %d: %v, want a *SubscribeError", code, err)
		}
	}
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultClear})
	c := e.dial(e.config(), nil)
	if c.Reason() != wecom.ReasonNone {
		t.Fatal("not connected after the refusals ended")
	}
	// A revoked secret is still an auth failure.
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultRevoke})
	waitDone(t, c)
	_, err := wecom.Dial(context.Background(), e.config(), nil)
	if !errors.Is(err, wecom.ErrAuthFailed) || errors.Is(err, wecom.ErrSubscribeRefused) {
		t.Fatalf("revoked: %v, want ErrAuthFailed only", err)
	}
}

// Close hands every callback already read to the handlers before Done.
func TestCloseHandsOverReadCallbacks(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	var mu sync.Mutex
	handled := map[string]int{}
	var afterClose int
	c := e.dial(e.config(), wecom.MessageFunc(func(c *wecom.Conn, _ string, m *wecom.MsgCallback) {
		<-release
		mu.Lock()
		handled[m.MsgID]++
		if c.Reason() == wecom.ReasonClosedByUs {
			afterClose++
		}
		mu.Unlock()
	}))
	const n = 10
	var ids []string
	for i := range n {
		r := e.post(fmt.Sprintf("u%d", i), "hi")
		if !r.Delivered {
			t.Fatal("not delivered")
		}
		ids = append(ids, r.MsgID)
	}
	// The simulator writes in order: once this push's ack is read, so are
	// the n callbacks written before it.
	if err := c.SendMarkdown(context.Background(), "u0", 0, "barrier"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case <-c.Done():
		t.Fatal("Done fired while read callbacks were still waiting for the handler")
	case <-time.After(100 * time.Millisecond):
	}
	unblock()
	waitDone(t, c)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if handled[id] != 1 {
			t.Errorf("message %s handled %d times, want 1", id, handled[id])
		}
	}
	if afterClose < n-1 {
		t.Errorf("%d handler calls saw the close, want at least %d", afterClose, n-1)
	}
}

// A handler too slow for the traffic: past CallbackQueue the connection
// closes (ReasonBacklog) instead of growing without bound or dropping; every
// callback read is handed over, in order, before Done.
func TestCallbackBacklogClosesWithoutLoss(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	var mu sync.Mutex
	var handled []string
	cfg := e.config()
	cfg.CallbackQueue = 16
	c := e.dial(cfg, wecom.MessageFunc(func(_ *wecom.Conn, _ string, m *wecom.MsgCallback) {
		<-release
		mu.Lock()
		handled = append(handled, m.MsgID)
		mu.Unlock()
	}))
	var delivered []string
	for i := 0; i < 100 && c.Reason() == wecom.ReasonNone; i++ {
		if r := e.post("u", fmt.Sprintf("m%d", i)); r.Delivered {
			delivered = append(delivered, r.MsgID)
		}
	}
	testwait.Eventually(t, waitLong, "backlog close", func() bool { return c.Reason() != wecom.ReasonNone })
	if c.Reason() != wecom.ReasonBacklog {
		t.Fatalf("reason = %v (%v), want callback_backlog", c.Reason(), c.Err())
	}
	select {
	case <-c.Done():
		t.Fatal("Done fired before the queued callbacks were handled")
	default:
	}
	unblock()
	waitDone(t, c)
	mu.Lock()
	defer mu.Unlock()
	// Handled: the first callbacks delivered, in order, each once; the
	// queue (16) plus the one in the handler at most.
	if len(handled) < cfg.CallbackQueue || len(handled) > cfg.CallbackQueue+1 {
		t.Fatalf("%d callbacks handled, want %d or %d", len(handled), cfg.CallbackQueue, cfg.CallbackQueue+1)
	}
	for i, id := range handled {
		if delivered[i] != id {
			t.Fatalf("handled[%d] = %s, want %s (in order, none skipped)", i, id, delivered[i])
		}
	}
}

// Close under traffic is a handshake: the simulator answers the close
// after writing what it had delivered to this connection, and the client
// reads until that answer, so every message the simulator counted as
// delivered here reaches the handler. Closing the socket at once lost
// the callbacks in flight (a graceful handover under load lost one so).
func TestCloseUnderTrafficLosesNoDeliveredCallback(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	var mu sync.Mutex
	handled := map[string]bool{}
	cfg := e.config()
	cfg.CallbackQueue = 1 << 20 // the flood below is not a backlog test (ReasonBacklog stops reading)
	c := e.dial(cfg, wecom.MessageFunc(func(_ *wecom.Conn, _ string, m *wecom.MsgCallback) {
		mu.Lock()
		handled[m.MsgID] = true
		mu.Unlock()
	}))
	var delivered []string
	var wg sync.WaitGroup
	closed := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			r, err := e.sim.PostMessage(wecomsim.MessageRequest{BotID: "bot1", UserID: fmt.Sprintf("u%d", i%50), Text: "hi"})
			if err != nil {
				t.Error(err)
				return
			}
			if r.Delivered {
				delivered = append(delivered, r.MsgID)
			}
			select {
			case <-closed:
				if !r.Delivered {
					return // the simulator has let go of the connection
				}
			default:
			}
		}
	})
	testwait.Eventually(t, waitLong, "traffic", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) >= 200
	})
	c.Close()
	close(closed)
	waitDone(t, c)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	lost := 0
	for _, id := range delivered {
		if !handled[id] {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d messages the simulator delivered to the connection never reached the handler (%d handled; connection ended: %v)", lost, len(delivered), len(handled), c.Err())
	}
	t.Logf("%d delivered, all handed over", len(delivered))
}
