package wecomsim

import (
	"errors"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
	"github.com/gorilla/websocket"
	"go.uber.org/goleak"
)

// late_acks: frames are applied at once, their acks come DelaySeconds late
// and in order, callbacks are not held, and frames after the window are
// acked at once.
func TestFaultLateAcks(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	reqID, _ := h.askAndReceive(c, "alice", "hi")
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultLateAcks, Seconds: 30}); err == nil {
		t.Fatal("late_acks without delay_seconds accepted")
	}
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultLateAcks, Seconds: 30, DelaySeconds: 0.5}); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	first := c.send(wecom.CmdRespondMsg, reqID, streamBody("s1", "progress", false))
	second := c.send(wecom.CmdRespondMsg, reqID, streamBody("s1", "final", true))
	// Applied before any ack: the transcript shows the final content.
	h.waitFor("final frame applied", func() bool {
		tr := h.srv.Transcript(bot1, "alice")
		return len(tr) == 2 && tr[1].Finished && tr[1].Content == "final"
	})
	// Callbacks are not held behind the late acks.
	h.askAndReceive(c, "alice", "still there?")
	a1 := c.next("first ack", func(f wecom.Frame) bool { return f.IsAck() })
	if a1.Headers.ReqID != first || a1.ErrCode != 0 {
		t.Fatalf("first ack = %+v", a1)
	}
	if late := time.Since(sent); late < 500*time.Millisecond {
		t.Fatalf("ack came after %v, want at least 500ms", late)
	}
	wantCode(t, c.ack(second), 0)
	if st := h.stats(bot1); !st.AcksLate || st.LateAcks != 2 {
		t.Fatalf("stats: acks_late %v, late_acks %d; want true, 2", st.AcksLate, st.LateAcks)
	}
	h.clock.Advance(31 * time.Second)
	wantCode(t, c.call(wecom.CmdPing, "", nil), 0)
	if st := h.stats(bot1); st.AcksLate || st.LateAcks != 2 {
		t.Fatalf("after the window: acks_late %v, late_acks %d", st.AcksLate, st.LateAcks)
	}
}

// A late ack is in the stats before it is on the wire: a client that has
// read it and then reads the stats finds it counted. The test holds the
// bot's lock (the stats' lock) from before the ack is due: an ack that
// arrives meanwhile must already be counted.
func TestFaultLateAckCountedBeforeSent(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	reqID, _ := h.askAndReceive(c, "alice", "hi")
	const delay = time.Second
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultLateAcks, Seconds: 30, DelaySeconds: delay.Seconds()}); err != nil {
		t.Fatal(err)
	}
	b, err := h.srv.bot(bot1)
	if err != nil {
		t.Fatal(err)
	}
	c.send(wecom.CmdRespondMsg, reqID, streamBody("s1", "final", true))
	h.waitFor("the ack held back", func() bool {
		b.mu.Lock()
		live := b.live
		b.mu.Unlock()
		if live == nil {
			return false
		}
		live.lateMu.Lock()
		defer live.lateMu.Unlock()
		return len(live.late) == 1
	})
	b.mu.Lock()
	select {
	case f := <-c.in:
		counted := b.stats.LateAcks
		b.mu.Unlock()
		if !f.IsAck() || counted != 1 {
			t.Fatalf("frame %+v arrived with late_acks %d, want the ack counted (1)", f, counted)
		}
	case <-time.After(delay + 2*time.Second):
		// Counting waits for the lock, and the ack for the count.
		b.mu.Unlock()
		wantCode(t, c.next("the late ack", func(f wecom.Frame) bool { return f.IsAck() }), 0)
	}
	if st := h.stats(bot1); st.LateAcks != 1 {
		t.Fatalf("late_acks %d after the ack, want 1", st.LateAcks)
	}
}

// refuse_subscribe: a subscribe with the right secret gets the fault's
// errcode (not 40001) and close 1013; the live connection is untouched;
// after the window subscribes work again.
func TestFaultRefuseSubscribe(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	live := h.subscribe(bot1, secret1)
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultRefuseSubscribe, Seconds: 10, ErrCode: wecom.ErrCodeInvalidCredential}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("refuse_subscribe with 40001: %v, want ErrInvalidRequest", err)
	}
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultRefuseSubscribe, Seconds: 10}); err != nil {
		t.Fatal(err)
	}
	c := h.dial()
	wantCode(t, c.call(wecom.CmdSubscribe, "", wecom.SubscribeBody{BotID: bot1, Secret: secret1}), wecom.ErrCodeCommandConflict)
	wantCloseCode(t, c.closed(), websocket.CloseTryAgainLater)
	wantCode(t, live.call(wecom.CmdPing, "", nil), 0)

	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultRefuseSubscribe, Seconds: 10, ErrCode: wecom.ErrCodeTransient1}); err != nil {
		t.Fatal(err)
	}
	c = h.dial()
	wantCode(t, c.call(wecom.CmdSubscribe, "", wecom.SubscribeBody{BotID: bot1, Secret: secret1}), wecom.ErrCodeTransient1)
	st := h.stats(bot1)
	if st.SubscribeRefusals != 2 || !st.SubscribeRefused || st.AuthFailures != 0 || st.Connections != 1 || st.Kicks != 0 {
		t.Fatalf("stats %+v", st)
	}
	h.clock.Advance(11 * time.Second)
	h.subscribe(bot1, secret1)
	if st := h.stats(bot1); st.SubscribeRefused || st.Kicks != 1 {
		t.Fatalf("after the window: %+v", st)
	}
}

// unsubscribe: the socket stays open but every frame but subscribe gets
// 846609, and callbacks stop; a new subscribe on it works.
func TestFaultUnsubscribe(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	reqID, _ := h.askAndReceive(c, "alice", "hi")
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultUnsubscribe}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, c.call(wecom.CmdPing, "", nil), wecom.ErrCodeNotSubscribed)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "x", true)), wecom.ErrCodeNotSubscribed)
	if r := h.post(MessageRequest{BotID: bot1, UserID: "alice", Text: "lost?"}); r.Delivered {
		t.Fatal("delivered to an unsubscribed connection")
	}
	st := h.stats(bot1)
	if st.Unsubscribed != 1 || st.Connected || st.NotSubscribed != 2 {
		t.Fatalf("stats %+v", st)
	}
	wantCode(t, c.call(wecom.CmdSubscribe, "", wecom.SubscribeBody{BotID: bot1, Secret: secret1}), 0)
	wantCode(t, c.call(wecom.CmdPing, "", nil), 0)
}

// group_silence: group chats' callbacks (messages and events) are withheld
// while single chats' still arrive; without seconds a new subscribe ends
// it, with seconds it outlasts subscribes until the window ends.
func TestFaultGroupSilence(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	group := MessageRequest{BotID: bot1, UserID: "alice", ChatType: wecom.ChatGroup, ChatID: "g1", Text: "hi all"}
	if r := h.post(group); !r.Delivered {
		t.Fatal("group message not delivered before the fault")
	}
	c.msgCallback()
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultGroupSilence, Seconds: -1}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("group_silence with negative seconds: %v, want ErrInvalidRequest", err)
	}
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultGroupSilence}); err != nil {
		t.Fatal(err)
	}
	if r := h.post(group); r.Delivered {
		t.Fatal("group message delivered under group_silence")
	}
	if r := h.event(EventRequest{BotID: bot1, UserID: "alice", ChatType: wecom.ChatGroup, ChatID: "g1", EventType: wecom.EventTemplateCardEvent, EventKey: "ok", TaskID: "t1"}); r.Delivered {
		t.Fatal("group event delivered under group_silence")
	}
	if st := h.stats(bot1); !st.GroupsSilenced || st.Undelivered != 2 {
		t.Fatalf("stats: groups_silenced %v, undelivered %d; want true, 2", st.GroupsSilenced, st.Undelivered)
	}
	h.askAndReceive(c, "bob", "direct still works?")
	// A fresh connection hears the groups again.
	c2 := h.subscribe(bot1, secret1)
	if r := h.post(group); !r.Delivered {
		t.Fatal("group message withheld from a new connection")
	}
	c2.msgCallback()
	if st := h.stats(bot1); st.GroupsSilenced {
		t.Fatal("stats: groups_silenced after a new subscribe")
	}

	// With seconds, a resubscribe does not help; the window's end does.
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultGroupSilence, Seconds: 30}); err != nil {
		t.Fatal(err)
	}
	c3 := h.subscribe(bot1, secret1)
	if r := h.post(group); r.Delivered {
		t.Fatal("group message delivered to a new connection within group_silence's seconds")
	}
	h.clock.Advance(31 * time.Second)
	if r := h.post(group); !r.Delivered {
		t.Fatal("group message withheld after group_silence's seconds")
	}
	c3.msgCallback()
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultGroupSilence}); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultClear}); err != nil {
		t.Fatal(err)
	}
	if r := h.post(group); !r.Delivered {
		t.Fatal("group message withheld after clear")
	}
}
