package wecomsim

import (
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
	"go.uber.org/goleak"
)

func TestRecordingOffByDefault(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()
	c := h.subscribe(bot1, secret1)
	reqID, _ := h.askAndReceive(c, "alice", "hello")
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "hi", true)), 0)
	if h.srv.Recording() {
		t.Fatal("recording on by default")
	}
	if ev := h.srv.Recorded(bot1); ev != nil {
		t.Fatalf("recorded while off: %+v", ev)
	}
}

func TestRecordingCallbacksAndAcceptedFrames(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{Record: true})
	defer h.close()
	c := h.subscribe(bot1, secret1)

	reqID, m := h.askAndReceive(c, "alice", "hello")
	h.waitFor("callback recorded", func() bool { return len(h.srv.Recorded(bot1)) == 1 })
	t0 := h.clock.Now()
	h.clock.Advance(10 * time.Millisecond)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "thinking", false)), 0)
	h.clock.Advance(10 * time.Millisecond)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "the answer", true)), 0)
	// Rejected: after finish (846608), and an unknown req_id. Not recorded.
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "again", true)), wecom.ErrCodeStreamExpired)
	wantCode(t, c.call(wecom.CmdRespondMsg, "nope", streamBody("s2", "x", true)), wecom.ErrCodeInvalidReqID)
	wantCode(t, c.call(wecom.CmdSendMsg, "", wecom.SendMsgBody{ChatID: "alice", MsgType: "markdown", Markdown: &wecom.TextContent{Content: "pushed"}}), 0)

	ev := h.srv.Recorded(bot1)
	if len(ev) != 4 {
		t.Fatalf("recorded %d events: %+v", len(ev), ev)
	}
	cb := ev[0]
	if cb.Kind != RecordCallback || cb.Cmd != wecom.CmdMsgCallback || cb.ReqID != reqID || cb.MsgID != m.MsgID || cb.Chat != "alice" || !cb.At.Equal(t0) {
		t.Fatalf("callback event %+v (want at %v)", cb, t0)
	}
	p1, p2, push := ev[1], ev[2], ev[3]
	if p1.Kind != RecordFrame || p1.Cmd != wecom.CmdRespondMsg || p1.ReplyTo != m.MsgID || p1.Chat != "alice" || p1.StreamID != "s1" ||
		p1.Finish || p1.ContentLen != len("thinking") || p1.ContentHash != contentHash("thinking") || !p1.At.Equal(t0.Add(10*time.Millisecond)) {
		t.Fatalf("progress frame %+v", p1)
	}
	if !p2.Finish || p2.ContentHash != contentHash("the answer") || !p2.At.Equal(t0.Add(20*time.Millisecond)) {
		t.Fatalf("final frame %+v", p2)
	}
	if push.Cmd != wecom.CmdSendMsg || push.Chat != "alice" || push.ReplyTo != "" || !push.Finish || push.ContentHash != contentHash("pushed") {
		t.Fatalf("push %+v", push)
	}
	if len(contentHash("x")) != 16 {
		t.Fatal("hash is not 8 bytes of hex")
	}

	// HTTP view, then drain.
	code, body := h.httpDo("GET", "/control/recording?bot_id="+bot1, nil)
	if code != 200 || body["recording"] != true || len(body["events"].([]any)) != 4 {
		t.Fatalf("GET /control/recording: %d %v", code, body)
	}
	if code, _ := h.httpDo("GET", "/control/recording?bot_id=ghost", nil); code != 404 {
		t.Fatalf("unknown bot: %d", code)
	}
	code, body = h.httpDo("GET", "/control/recording?bot_id="+bot1+"&drain=1", nil)
	if code != 200 || len(body["events"].([]any)) != 4 {
		t.Fatalf("drain: %d %v", code, body)
	}
	if ev := h.srv.Recorded(bot1); ev != nil {
		t.Fatalf("after drain: %+v", ev)
	}

	// Stopped: nothing more is recorded.
	h.srv.StopRecording()
	reqID, _ = h.askAndReceive(c, "bob", "hi")
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s3", "yo", true)), 0)
	if ev := h.srv.DrainRecorded(bot1); ev != nil {
		t.Fatalf("recorded while stopped: %+v", ev)
	}
	h.srv.StartRecording()
	if !h.srv.Recording() {
		t.Fatal("StartRecording")
	}
}

// The reply drop_on_reply cut off is recorded as "dropped" (not applied,
// so never as a frame), with what it would have shown.
func TestRecordingDroppedReply(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{Record: true})
	defer h.close()
	c := h.subscribe(bot1, secret1)
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultDropOnReply, MsgID: "m-doomed"}); err != nil {
		t.Fatal(err)
	}
	h.post(MessageRequest{BotID: bot1, UserID: "alice", Text: "hi", MsgID: "m-doomed"})
	reqID, _ := c.msgCallback()
	c.send(wecom.CmdRespondMsg, reqID, streamBody("s1", "never shown", true))
	c.closed()
	h.waitFor("dropped reply recorded", func() bool { return len(h.srv.Recorded(bot1)) == 2 })
	ev := h.srv.Recorded(bot1)
	d := ev[1]
	if ev[0].Kind != RecordCallback || d.Kind != RecordDropped || d.ReplyTo != "m-doomed" || d.Chat != "alice" ||
		d.StreamID != "s1" || !d.Finish || d.ContentLen != len("never shown") || d.ContentHash != contentHash("never shown") {
		t.Fatalf("recorded %+v", ev)
	}
}
