package wecomsim

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/botctl/botctl/pkg/wecom"
	"github.com/gorilla/websocket"
	"go.uber.org/goleak"
)

func TestSubscribeOK(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	wantCode(t, c.call(wecom.CmdPing, "", nil), 0)
	st := h.stats(bot1)
	if st.Connections != 1 || !st.Connected || st.Frames[wecom.CmdSubscribe] != 1 || st.Frames[wecom.CmdPing] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSubscribeWrongSecret(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.dial()
	a := c.call(wecom.CmdSubscribe, "", wecom.SubscribeBody{BotID: bot1, Secret: "not-the-secret-xyz"})
	wantCode(t, a, wecom.ErrCodeInvalidCredential)
	if strings.Contains(a.ErrMsg, "xyz") || strings.Contains(a.ErrMsg, secret1) {
		t.Fatalf("errmsg leaks a secret: %q", a.ErrMsg)
	}
	wantCloseCode(t, c.closed(), websocket.ClosePolicyViolation)
	if st := h.stats(bot1); st.AuthFailures != 1 || st.Connections != 0 || st.Connected {
		t.Fatalf("stats %+v", st)
	}

	// Unknown bot: refused the same way.
	c = h.dial()
	wantCode(t, c.call(wecom.CmdSubscribe, "", wecom.SubscribeBody{BotID: "nobody", Secret: "x"}), wecom.ErrCodeInvalidCredential)
	c.closed()
}

func TestRevokeAndRestore(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultRevoke}); err != nil {
		t.Fatal(err)
	}
	wantCloseCode(t, c.closed(), websocket.ClosePolicyViolation)

	c2 := h.dial()
	wantCode(t, c2.call(wecom.CmdSubscribe, "", wecom.SubscribeBody{BotID: bot1, Secret: secret1}), wecom.ErrCodeInvalidCredential)
	c2.closed()
	if st := h.stats(bot1); st.AuthFailures != 1 || !st.Revoked || st.Connected {
		t.Fatalf("stats %+v", st)
	}

	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultRestore}); err != nil {
		t.Fatal(err)
	}
	h.subscribe(bot1, secret1)
	if st := h.stats(bot1); st.Connections != 2 || st.Revoked || !st.Connected {
		t.Fatalf("stats %+v", st)
	}
}

func TestKick(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	old := h.subscribe(bot1, secret1)
	reqID, _ := h.askAndReceive(old, "alice", "hi")
	other := h.subscribe(bot2, secret2) // another bot is not affected

	c := h.subscribe(bot1, secret1)
	evReqID, ev := old.eventCallback()
	if ev.Event.EventType != wecom.EventDisconnected || ev.MsgType != wecom.MsgTypeEvent || ev.AIBotID != bot1 || evReqID == "" || ev.MsgID == "" {
		t.Fatalf("disconnected_event: req_id %q body %+v", evReqID, ev)
	}
	if err := old.closed(); err == nil {
		t.Fatal("old connection not closed")
	}
	st := h.stats(bot1)
	if st.Kicks != 1 || st.Connections != 2 || !st.Connected {
		t.Fatalf("stats %+v", st)
	}
	if st2 := h.stats(bot2); st2.Kicks != 0 || !st2.Connected {
		t.Fatalf("bot2 stats %+v", st2)
	}
	wantCode(t, other.call(wecom.CmdPing, "", nil), 0)

	// The old connection's req_id is not valid on the new one.
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "late", true)), wecom.ErrCodeInvalidReqID)
	if tr := h.srv.Transcript(bot1, "alice"); len(tr) != 1 {
		t.Fatalf("transcript %+v", tr)
	}
}

// A kicked connection that is still readable gets 846609, not a silent
// success. The server closes it right after disconnected_event, so the race
// is reproduced on the server's own connection object.
func TestKickedConnectionNotSubscribed(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	old := h.subscribe(bot1, secret1)
	reqID, _ := h.askAndReceive(old, "alice", "hi")
	b, err := h.srv.bot(bot1)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	oldConn := b.live
	b.mu.Unlock()

	h.subscribe(bot1, secret1)
	old.closed()
	for _, f := range []func() result{
		func() result {
			return oldConn.respondMsgLocked(b, &wecom.Frame{Cmd: wecom.CmdRespondMsg, Headers: wecom.Headers{ReqID: reqID}}, h.clock.Now())
		},
		func() result {
			return oldConn.sendMsgLocked(b, &wecom.Frame{Cmd: wecom.CmdSendMsg, Headers: wecom.Headers{ReqID: "x"}}, h.clock.Now())
		},
	} {
		b.mu.Lock()
		r := f()
		b.mu.Unlock()
		if r.code != wecom.ErrCodeNotSubscribed {
			t.Fatalf("frame on a kicked connection: %+v", r)
		}
	}
	if st := h.stats(bot1); st.NotSubscribed != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNotSubscribed(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.dial()
	for _, cmd := range []string{wecom.CmdPing, wecom.CmdRespondMsg, wecom.CmdSendMsg, wecom.CmdUploadMediaInit} {
		wantCode(t, c.call(cmd, "", map[string]any{}), wecom.ErrCodeNotSubscribed)
	}
	// The connection stays usable: subscribing now works.
	wantCode(t, c.call(wecom.CmdSubscribe, "", wecom.SubscribeBody{BotID: bot1, Secret: secret1}), 0)
	wantCode(t, c.call(wecom.CmdPing, "", nil), 0)
}

func TestMalformedFrames(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)

	c.sendRaw(websocket.TextMessage, []byte(`{"cmd":"ping",`))
	wantCode(t, c.ack(""), wecom.ErrCodeInvalidParam)

	c.sendRaw(websocket.TextMessage, []byte(`{"cmd":"ping","headers":{}}`))
	wantCode(t, c.ack(""), wecom.ErrCodeInvalidParam)

	wantCode(t, c.call("aibot_do_magic", "", nil), wecom.ErrCodeInvalidParam)

	c.sendRaw(websocket.TextMessage, []byte(`{"cmd":"aibot_respond_msg","headers":{"req_id":"r1"},"body":"not an object"}`))
	wantCode(t, c.ack("r1"), wecom.ErrCodeInvalidReqID) // req_id checked before the body

	// Still alive, and other bots unaffected.
	wantCode(t, c.call(wecom.CmdPing, "", nil), 0)
	st := h.stats(bot1)
	if st.Malformed != 3 || st.Frames["unknown"] != 1 || st.Frames["malformed"] != 1 {
		t.Fatalf("stats %+v", st)
	}

	c.sendRaw(websocket.BinaryMessage, []byte{1, 2, 3})
	wantCode(t, c.ack(""), wecom.ErrCodeInvalidParam)
	wantCloseCode(t, c.closed(), websocket.CloseUnsupportedData)
	if st := h.stats(bot1); st.Malformed != 4 || st.Connected {
		t.Fatalf("stats %+v", st)
	}
}

func TestMalformedBeforeSubscribe(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.dial()
	c.sendRaw(websocket.TextMessage, []byte(`]]]`))
	wantCode(t, c.ack(""), wecom.ErrCodeInvalidParam)
	c.sendRaw(websocket.TextMessage, []byte(`{"cmd":"aibot_subscribe","headers":{"req_id":"s"},"body":[1]}`))
	wantCode(t, c.ack("s"), wecom.ErrCodeInvalidParam)
	c.sendRaw(websocket.TextMessage, []byte(`{"cmd":"aibot_subscribe","headers":{},"body":{"bot_id":"bot1","secret":"secret-1"}}`))
	wantCode(t, c.ack(""), wecom.ErrCodeInvalidParam)
	wantCode(t, c.call(wecom.CmdSubscribe, "", wecom.SubscribeBody{BotID: bot1, Secret: secret1}), 0)
}

func TestOversizedFrame(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{MaxFrameBytes: 4096})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	other := h.subscribe(bot2, secret2)
	c.send(wecom.CmdPing, "big", map[string]string{"pad": strings.Repeat("x", 5000)})
	wantCloseCode(t, c.closed(), websocket.CloseMessageTooBig)
	wantCode(t, other.call(wecom.CmdPing, "", nil), 0)
	// gorilla sends 1009 before the server's read loop sees the error:
	// wait for the count rather than assume it.
	h.waitFor("oversized counted and bot disconnected", func() bool {
		st := h.stats(bot1)
		return st.Oversized == 1 && !st.Connected
	})
}

func TestCloseEndsEverything(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	c1 := h.subscribe(bot1, secret1)
	c2 := h.dial()
	h.srv.Close()
	h.srv.Close() // idempotent
	wantCloseCode(t, c1.closed(), websocket.CloseGoingAway)
	c2.closed()
	h.close()
}

func TestServeAndShutdown(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := New(Config{})
	if err := srv.AddBot(bot1, secret1); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	ws, _, err := websocket.DefaultDialer.Dial("ws://"+ln.Addr().String()+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.WriteJSON(wecom.Frame{Cmd: wecom.CmdSubscribe, Headers: wecom.Headers{ReqID: "s1"},
		Body: []byte(`{"bot_id":"bot1","secret":"secret-1"}`)}); err != nil {
		t.Fatal(err)
	}
	var a wecom.Frame
	if err := ws.ReadJSON(&a); err != nil || a.ErrCode != 0 || a.Headers.ReqID != "s1" {
		t.Fatalf("subscribe ack %+v %v", a, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	_, _, err = ws.ReadMessage()
	wantCloseCode(t, err, websocket.CloseGoingAway)
	if err := srv.Serve(ln); err == nil {
		t.Fatal("Serve after Shutdown succeeded")
	}
}

// A subscribe refused (a wrong secret) does not kick the connection that
// holds the bot: it keeps receiving; one with the secret set since
// (SetSecret) replaces it.
func TestFailedSubscribeKeepsTheHolder(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	holder := h.subscribe(bot1, secret1)
	c := h.dial()
	wantCode(t, c.call(wecom.CmdSubscribe, "", wecom.SubscribeBody{BotID: bot1, Secret: "not-the-secret"}), wecom.ErrCodeInvalidCredential)
	c.closed()
	if st := h.stats(bot1); st.Kicks != 0 || !st.Connected || st.Connections != 1 || st.AuthFailures != 1 {
		t.Fatalf("after a refused subscribe: stats %+v, want the holder kept", st)
	}
	h.askAndReceive(holder, "ann", "still there?")

	if err := h.srv.SetSecret(bot1, "new-secret"); err != nil {
		t.Fatal(err)
	}
	if st := h.stats(bot1); !st.Connected {
		t.Fatal("a secret changed dropped the holder")
	}
	c = h.dial()
	wantCode(t, c.call(wecom.CmdSubscribe, "", wecom.SubscribeBody{BotID: bot1, Secret: secret1}), wecom.ErrCodeInvalidCredential)
	c.closed()
	h.subscribe(bot1, "new-secret")
	holder.closed()
	if st := h.stats(bot1); st.Kicks != 1 || !st.Connected {
		t.Fatalf("after the new secret's subscribe: stats %+v, want the holder kicked", st)
	}
}
