package wecomsim

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
	"go.uber.org/goleak"
)

func TestMsgCallbackBody(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	reqID, m := h.askAndReceive(c, "alice", "hello")
	if !strings.HasPrefix(reqID, wecom.CmdMsgCallback+"_") {
		t.Fatalf("req_id %q", reqID)
	}
	if m.AIBotID != bot1 || m.ChatType != wecom.ChatSingle || m.ChatID != "" || m.From.UserID != "alice" ||
		m.MsgType != wecom.MsgTypeText || m.Text == nil || m.Text.Content != "hello" || m.CreateTime != h.clock.Now().Unix() {
		t.Fatalf("callback %+v", m)
	}

	h.post(MessageRequest{BotID: bot1, UserID: "bob", Text: "hey all", ChatType: "group", ChatID: "g1"})
	_, g := c.msgCallback()
	if g.ChatType != wecom.ChatGroup || g.ChatID != "g1" || g.From.UserID != "bob" || g.Conversation() != "g1" {
		t.Fatalf("group callback %+v", g)
	}

	h.post(MessageRequest{BotID: bot1, UserID: "alice", Text: "spoken", MsgType: "voice"})
	_, v := c.msgCallback()
	if v.MsgType != wecom.MsgTypeVoice || v.Voice == nil || v.Voice.Content != "spoken" || v.PlainText() != "spoken" {
		t.Fatalf("voice callback %+v", v)
	}

	h.post(MessageRequest{BotID: bot1, UserID: "alice", MsgType: "image"})
	_, img := c.msgCallback()
	if img.Image == nil || img.Image.URL == "" || img.Image.AESKey == "" {
		t.Fatalf("image callback %+v", img)
	}

	// Replaying a msgid redelivers the same message with a new req_id.
	res := h.post(MessageRequest{BotID: bot1, UserID: "alice", MsgID: m.MsgID})
	dupReq, dup := c.msgCallback()
	if dup.MsgID != m.MsgID || dupReq == reqID || dup.Text.Content != "hello" || res.Seq != 1 {
		t.Fatalf("replay: req_id %s body %+v result %+v", dupReq, dup, res)
	}
	if tr := h.srv.Transcript(bot1, "alice"); len(tr) != 3 {
		t.Fatalf("a replayed callback must not add a message: %+v", tr)
	}
}

// A message posted with an old create_time (WeCom redelivering what it
// sent long ago) carries it; a future one is refused.
func TestPostedCreateTime(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	old := h.clock.Now().Add(-time.Hour).Unix()
	h.post(MessageRequest{BotID: bot1, UserID: "alice", Text: "asked an hour ago", MsgID: "m-old", CreateTime: old})
	if _, m := c.msgCallback(); m.MsgID != "m-old" || m.CreateTime != old {
		t.Fatalf("callback %+v, want create_time %d", m, old)
	}
	if _, err := h.srv.PostMessage(MessageRequest{BotID: bot1, UserID: "alice", Text: "x", CreateTime: h.clock.Now().Unix() + 60}); err == nil || !strings.Contains(err.Error(), "create_time") {
		t.Fatalf("a future create_time: %v", err)
	}
}

func TestInvalidReqIDAcrossConnections(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	wantCode(t, c.call(wecom.CmdRespondMsg, "made_up", streamBody("s0", "x", true)), wecom.ErrCodeInvalidReqID)

	reqID, _ := h.askAndReceive(c, "alice", "hi")
	c2 := h.subscribe(bot1, secret1) // reconnect: c is kicked
	c.closed()
	wantCode(t, c2.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "answer", true)), wecom.ErrCodeInvalidReqID)

	// bot2 cannot use bot1's req_id either.
	reqID2, _ := h.askAndReceive(c2, "alice", "again")
	o := h.subscribe(bot2, secret2)
	wantCode(t, o.call(wecom.CmdRespondMsg, reqID2, streamBody("s2", "x", true)), wecom.ErrCodeInvalidReqID)

	if st := h.stats(bot1); st.InvalidReqIDs != 2 {
		t.Fatalf("stats %+v", st)
	}
	if tr := h.srv.Transcript(bot1, "alice"); len(tr) != 2 {
		t.Fatalf("rejected replies must not show: %+v", tr)
	}
	wantCode(t, c2.call(wecom.CmdRespondMsg, reqID2, streamBody("s3", "ok", true)), 0)
}

func TestRelaxReqIDBinding(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{RelaxReqIDBinding: true})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	reqID, _ := h.askAndReceive(c, "alice", "hi")
	c2 := h.subscribe(bot1, secret1)
	c.closed()
	wantCode(t, c2.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "answer", true)), 0)
	tr := h.srv.Transcript(bot1, "alice")
	if len(tr) != 2 || tr[1].Content != "answer" || !tr[1].Finished {
		t.Fatalf("transcript %+v", tr)
	}
}

func TestStreamLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	reqID, m := h.askAndReceive(c, "alice", "hi")
	first := streamBody("s1", "Hel", false)
	first.Stream.Feedback = &wecom.Feedback{ID: "fb1"}
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, first), 0)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "Hello", false)), 0)

	late := streamBody("s1", "Hello!", false)
	late.Stream.Feedback = &wecom.Feedback{ID: "fb2"}
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, late), wecom.ErrCodeInvalidParam)
	items := streamBody("s1", "Hello!", false)
	items.Stream.MsgItem = []wecom.ReplyMsgItem{replyImage(pngBytes(10))}
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, items), wecom.ErrCodeInvalidParam)
	tooMany := streamBody("s1", "Hello!", true)
	tooMany.Stream.MsgItem = make([]wecom.ReplyMsgItem, wecom.MaxMsgItems+1)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, tooMany), wecom.ErrCodeInvalidParam)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("", "x", false)), wecom.ErrCodeInvalidParam)

	tr := h.srv.Transcript(bot1, "alice")
	if len(tr) != 2 || tr[1].Content != "Hello" || tr[1].Finished || tr[1].From != "bot" || tr[1].ReplyTo != m.MsgID || tr[1].Kind != "stream" || tr[1].Seq != 2 {
		t.Fatalf("transcript mid-stream %+v", tr)
	}

	done := streamBody("s1", "Hello, world", true)
	done.Stream.MsgItem = []wecom.ReplyMsgItem{replyImage(pngBytes(10))}
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, done), 0)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "more", true)), wecom.ErrCodeStreamExpired)

	tr = h.srv.Transcript(bot1, "alice")
	if len(tr) != 2 || tr[1].Content != "Hello, world" || !tr[1].Finished || tr[1].Expired || tr[1].Images != 1 {
		t.Fatalf("transcript after finish %+v", tr)
	}
	st := h.stats(bot1)
	if st.FinishedStreamFrames != 1 || st.ExpiredUpdates != 0 || st.Frames[wecom.CmdRespondMsg] != 8 {
		t.Fatalf("stats %+v", st)
	}

	// A second user message continues the per-bot seq.
	res := h.post(MessageRequest{BotID: bot1, UserID: "bob", Text: "x"})
	if res.Seq != 3 {
		t.Fatalf("seq %d, want 3", res.Seq)
	}
}

func TestContentTooLong(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	reqID, _ := h.askAndReceive(c, "alice", "hi")
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "short", false)), 0)
	// 20,480 bytes exactly is fine; one more byte (a 3-byte rune over) is not.
	exact := strings.Repeat("a", wecom.MaxContentBytes)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", exact, false)), 0)
	over := strings.Repeat("中", wecom.MaxContentBytes/3) + "abc" // 20,481 bytes
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", over, true)), wecom.ErrCodeContentTooLong)
	tr := h.srv.Transcript(bot1, "alice")
	if tr[1].Content != exact || tr[1].Finished {
		t.Fatal("a refused frame changed the transcript")
	}
	// markdown pushes have the same limit.
	md := wecom.SendMsgBody{ChatID: "alice", MsgType: "markdown", Markdown: &wecom.TextContent{Content: over}}
	wantCode(t, c.call(wecom.CmdSendMsg, "", md), wecom.ErrCodeContentTooLong)
	if st := h.stats(bot1); st.Errors["40060"] != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestStreamWindowExpiry(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{StreamWindow: time.Minute})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	reqID, _ := h.askAndReceive(c, "alice", "hi")
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "a", false)), 0)
	h.clock.Advance(40 * time.Second)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "ab", false)), 0)
	h.clock.Advance(40 * time.Second) // 80s after the FIRST frame: updates did not extend it
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "abc", false)), wecom.ErrCodeStreamExpired)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "abcd", true)), wecom.ErrCodeStreamExpired)

	tr := h.srv.Transcript(bot1, "alice")
	if tr[1].Content != "ab" || tr[1].Finished || !tr[1].Expired {
		t.Fatalf("transcript %+v", tr)
	}
	if st := h.stats(bot1); st.ExpiredUpdates != 2 || st.Errors["846608"] != 2 {
		t.Fatalf("stats %+v", st)
	}
	// A new stream on the same req_id starts a new window.
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s2", "closing", true)), 0)
}

// The same rule with the real clock and a short window.
func TestStreamWindowRealClock(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{StreamWindow: 300 * time.Millisecond, Now: time.Now})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	reqID, _ := h.askAndReceive(c, "alice", "hi")
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "a", false)), 0)
	// The server accepted the first frame before we got its ack: waiting
	// twice the window from here is past the window however loaded the box.
	time.Sleep(600 * time.Millisecond) // waiting out the window is the point
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "ab", true)), wecom.ErrCodeStreamExpired)
}

func TestQuota(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{RateLimit: 3, RateWindow: 10 * time.Second})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	reqID, _ := h.askAndReceive(c, "alice", "hi")
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "1", false)), 0)
	h.clock.Advance(4 * time.Second)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "12", false)), 0)
	// A proactive push to the same chat shares the quota.
	wantCode(t, c.call(wecom.CmdSendMsg, "", wecom.SendMsgBody{ChatID: "alice", MsgType: "markdown", Markdown: &wecom.TextContent{Content: "push"}}), 0)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "123", true)), wecom.ErrCodeRateLimited)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "1234", true)), wecom.ErrCodeRateLimited)

	// Rejected frames changed nothing the user sees.
	tr := h.srv.Transcript(bot1, "alice")
	if len(tr) != 3 || tr[1].Content != "12" || tr[1].Finished {
		t.Fatalf("transcript %+v", tr)
	}
	// Another conversation has its own quota.
	h.post(MessageRequest{BotID: bot1, UserID: "bob", Text: "x"})
	wantCode(t, c.call(wecom.CmdSendMsg, "", wecom.SendMsgBody{ChatID: "bob", MsgType: "markdown", Markdown: &wecom.TextContent{Content: "hi bob"}}), 0)

	// Sliding window: 6s later the first frame (t=0) has left the window,
	// but not the two at t=4s; rejected frames did not consume quota.
	h.clock.Advance(6 * time.Second)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "123", false)), 0)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "1234", true)), wecom.ErrCodeRateLimited)
	h.clock.Advance(4 * time.Second)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "1234", true)), 0)

	tr = h.srv.Transcript(bot1, "alice")
	if tr[1].Content != "1234" || !tr[1].Finished {
		t.Fatalf("transcript %+v", tr)
	}
	if st := h.stats(bot1); st.QuotaRejections != 3 || st.Errors["45009"] != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSendMsg(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	md := func(chat string, chatType int) wecom.SendMsgBody {
		return wecom.SendMsgBody{ChatID: chat, ChatType: chatType, MsgType: "markdown", Markdown: &wecom.TextContent{Content: "**news**"}}
	}
	wantCode(t, c.call(wecom.CmdSendMsg, "", md("alice", 0)), wecom.ErrCodeChatNotFound)

	h.post(MessageRequest{BotID: bot1, UserID: "alice", Text: "hi"})
	h.post(MessageRequest{BotID: bot1, UserID: "bob", Text: "hi all", ChatType: "group", ChatID: "g1"})
	wantCode(t, c.call(wecom.CmdSendMsg, "", md("alice", 0)), 0)                    // inferred single
	wantCode(t, c.call(wecom.CmdSendMsg, "", md("alice", wecom.ChatTypeSingle)), 0) // explicit
	wantCode(t, c.call(wecom.CmdSendMsg, "", md("g1", 0)), 0)                       // inferred group
	wantCode(t, c.call(wecom.CmdSendMsg, "", md("g1", wecom.ChatTypeGroup)), 0)
	wantCode(t, c.call(wecom.CmdSendMsg, "", md("alice", wecom.ChatTypeGroup)), wecom.ErrCodeChatNotFound)
	wantCode(t, c.call(wecom.CmdSendMsg, "", md("bob", 0)), wecom.ErrCodeChatNotFound) // bob only talked in g1
	wantCode(t, c.call(wecom.CmdSendMsg, "", md("alice", 7)), wecom.ErrCodeInvalidParam)
	wantCode(t, c.call(wecom.CmdSendMsg, "", md("", 0)), wecom.ErrCodeInvalidParam)

	text := wecom.SendMsgBody{ChatID: "alice", MsgType: "text", Text: &wecom.TextContent{Content: "plain"}}
	wantCode(t, c.call(wecom.CmdSendMsg, "", text), wecom.ErrCodeInvalidMsgType)
	card := wecom.SendMsgBody{ChatID: "g1", MsgType: "template_card", TemplateCard: json.RawMessage(`{"card_type":"text_notice"}`)}
	wantCode(t, c.call(wecom.CmdSendMsg, "", card), 0)
	wantCode(t, c.call(wecom.CmdSendMsg, "", wecom.SendMsgBody{ChatID: "g1", MsgType: "template_card"}), wecom.ErrCodeInvalidParam)

	tr := h.srv.Transcript(bot1, "g1")
	if len(tr) != 4 || tr[1].Kind != "markdown" || tr[1].ReplyTo != "" || tr[3].Kind != "template_card" || tr[3].Content != `{"card_type":"text_notice"}` {
		t.Fatalf("group transcript %+v", tr)
	}
	if st := h.stats(bot1); st.ChatNotFound != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRespondMsgTypes(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	reqID, _ := h.askAndReceive(c, "alice", "hi")
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, map[string]any{"msgtype": "markdown", "markdown": map[string]string{"content": "x"}}), wecom.ErrCodeInvalidMsgType)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, wecom.RespondBody{MsgType: "template_card", TemplateCard: json.RawMessage(`{"card_type":"button_interaction"}`)}), 0)
	swtc := streamBody("s1", "thinking", false)
	swtc.MsgType = wecom.MsgTypeStreamWithTemplateCard
	swtc.TemplateCard = json.RawMessage(`"text_notice"`)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, swtc), wecom.ErrCodeInvalidParam) // a card is an object
	swtc.TemplateCard = json.RawMessage(`{"card_type":"text_notice"}`)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, swtc), 0)
	tr := h.srv.Transcript(bot1, "alice")
	if len(tr) != 3 || tr[1].Kind != "template_card" || tr[2].Kind != "stream_with_template_card" {
		t.Fatalf("transcript %+v", tr)
	}
}

func TestWelcome(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{WelcomeWindow: 5 * time.Second})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	res := h.event(EventRequest{BotID: bot1, UserID: "alice", EventType: wecom.EventEnterChat})
	reqID, ev := c.eventCallback()
	if reqID != res.ReqID || ev.Event.EventType != wecom.EventEnterChat || ev.From.UserID != "alice" || ev.MsgType != "event" || ev.MsgID != res.MsgID {
		t.Fatalf("event %s %+v (result %+v)", reqID, ev, res)
	}
	welcome := wecom.WelcomeBody{MsgType: "text", Text: &wecom.TextContent{Content: "Welcome!"}}
	// respond_msg cannot answer an event; a welcome cannot answer a message.
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "x", true)), wecom.ErrCodeInvalidReqID)
	msgReq, _ := h.askAndReceive(c, "alice", "hi")
	wantCode(t, c.call(wecom.CmdRespondWelcomeMsg, msgReq, welcome), wecom.ErrCodeInvalidReqID)

	wantCode(t, c.call(wecom.CmdRespondWelcomeMsg, reqID, wecom.WelcomeBody{MsgType: "markdown"}), wecom.ErrCodeInvalidMsgType)
	h.clock.Advance(4 * time.Second)
	wantCode(t, c.call(wecom.CmdRespondWelcomeMsg, reqID, welcome), 0)
	wantCode(t, c.call(wecom.CmdRespondWelcomeMsg, reqID, welcome), wecom.ErrCodeInvalidReqID) // once

	// Too late.
	h.event(EventRequest{BotID: bot1, UserID: "bob", EventType: wecom.EventEnterChat})
	late, _ := c.eventCallback()
	h.clock.Advance(5*time.Second + time.Millisecond)
	wantCode(t, c.call(wecom.CmdRespondWelcomeMsg, late, welcome), wecom.ErrCodeInvalidReqID)

	tr := h.srv.Transcript(bot1, "alice")
	if len(tr) != 2 || tr[1].Kind != "welcome" || tr[1].Content != "Welcome!" || tr[1].ReplyTo != res.MsgID {
		t.Fatalf("transcript %+v", tr)
	}
	if tr := h.srv.Transcript(bot1, "bob"); len(tr) != 0 {
		t.Fatalf("bob transcript %+v", tr)
	}
	if st := h.stats(bot1); st.InvalidReqIDs != 4 {
		t.Fatalf("stats %+v", st)
	}
}

func TestUpdateTemplateCard(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{UpdateWindow: 5 * time.Second})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	res := h.event(EventRequest{BotID: bot1, UserID: "bob", EventType: wecom.EventTemplateCardEvent,
		ChatType: "group", ChatID: "g1", EventKey: "approve", TaskID: "t1"})
	reqID, ev := c.eventCallback()
	if ev.ChatID != "g1" || ev.ChatType != "group" || ev.Event.EventKey != "approve" || ev.Event.TaskID != "t1" {
		t.Fatalf("event %+v", ev)
	}
	card := json.RawMessage(`{"card_type":"button_interaction","task_id":"t1"}`)
	wantCode(t, c.call(wecom.CmdRespondUpdateMsg, reqID, wecom.UpdateBody{ResponseType: "replace", TemplateCard: card}), wecom.ErrCodeInvalidParam)
	wantCode(t, c.call(wecom.CmdRespondUpdateMsg, reqID, wecom.UpdateBody{ResponseType: wecom.ResponseTypeUpdateTemplateCard, TemplateCard: card}), 0)
	tr := h.srv.Transcript(bot1, "g1")
	if len(tr) != 1 || tr[0].Kind != "update_template_card" || tr[0].ReplyTo != res.MsgID {
		t.Fatalf("transcript %+v", tr)
	}

	h.event(EventRequest{BotID: bot1, UserID: "bob", EventType: wecom.EventTemplateCardEvent, ChatType: "group", ChatID: "g1"})
	late, _ := c.eventCallback()
	h.clock.Advance(6 * time.Second)
	wantCode(t, c.call(wecom.CmdRespondUpdateMsg, late, wecom.UpdateBody{ResponseType: wecom.ResponseTypeUpdateTemplateCard, TemplateCard: card}), wecom.ErrCodeInvalidReqID)
}

func TestUpload(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	a := c.call(wecom.CmdUploadMediaInit, "", wecom.UploadInitBody{Type: "image", Filename: "a.png", TotalSize: 10, TotalChunks: 2})
	wantCode(t, a, 0)
	var init wecom.UploadInitResult
	if err := json.Unmarshal(a.Body, &init); err != nil || init.UploadID == "" {
		t.Fatalf("init body %s", a.Body)
	}
	chunk := func(i int, data []byte) wecom.UploadChunkBody {
		return wecom.UploadChunkBody{UploadID: init.UploadID, ChunkIndex: i, Base64Data: base64.StdEncoding.EncodeToString(data)}
	}
	wantCode(t, c.call(wecom.CmdUploadMediaChunk, "", chunk(0, []byte("hello"))), 0)
	wantCode(t, c.call(wecom.CmdUploadMediaFinish, "", wecom.UploadFinishBody(init)), wecom.ErrCodeInvalidParam) // chunk 1 missing
	wantCode(t, c.call(wecom.CmdUploadMediaChunk, "", chunk(2, []byte("x"))), wecom.ErrCodeInvalidParam)
	wantCode(t, c.call(wecom.CmdUploadMediaChunk, "", chunk(1, make([]byte, wecom.MaxUploadChunkBytes+1))), wecom.ErrCodeInvalidParam)
	wantCode(t, c.call(wecom.CmdUploadMediaChunk, "", chunk(1, []byte("world"))), 0)
	f := c.call(wecom.CmdUploadMediaFinish, "", wecom.UploadFinishBody(init))
	wantCode(t, f, 0)
	var fin wecom.UploadFinishResult
	if err := json.Unmarshal(f.Body, &fin); err != nil || fin.MediaID == "" {
		t.Fatalf("finish body %s", f.Body)
	}
	wantCode(t, c.call(wecom.CmdUploadMediaInit, "", wecom.UploadInitBody{Type: "image", TotalSize: 1, TotalChunks: 101}), wecom.ErrCodeInvalidParam)

	// The media can be pushed; an unknown media_id cannot.
	h.post(MessageRequest{BotID: bot1, UserID: "alice", Text: "send a picture"})
	c.msgCallback()
	wantCode(t, c.call(wecom.CmdSendMsg, "", map[string]any{"chatid": "alice", "msgtype": "image", "image": map[string]string{"media_id": fin.MediaID}}), 0)
	wantCode(t, c.call(wecom.CmdSendMsg, "", map[string]any{"chatid": "alice", "msgtype": "image", "image": map[string]string{"media_id": "nope"}}), wecom.ErrCodeInvalidParam)
}

// enter_check_update is answered with ww_ai_robot_enter_event and the
// bot's version: once per event, a version required, inside the window;
// the version is what Stats reports.
func TestEnterCheckUpdateVersionReply(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{WelcomeWindow: 5 * time.Second})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	h.event(EventRequest{BotID: bot1, UserID: "alice", EventType: wecom.EventEnterCheckUpdate})
	reqID, ev := c.eventCallback()
	if ev.Event.EventType != wecom.EventEnterCheckUpdate {
		t.Fatalf("event %+v", ev)
	}
	// Not a welcome's answer, nor a message's; a version is required.
	wantCode(t, c.call(wecom.CmdRespondWelcomeMsg, reqID, wecom.WelcomeBody{MsgType: "text", Text: &wecom.TextContent{Content: "hi"}}), wecom.ErrCodeInvalidReqID)
	msgReq, _ := h.askAndReceive(c, "alice", "hi")
	wantCode(t, c.call(wecom.CmdEnterEventReply, msgReq, wecom.EnterEventBody{Version: "1.0.0"}), wecom.ErrCodeInvalidReqID)
	wantCode(t, c.call(wecom.CmdEnterEventReply, reqID, wecom.EnterEventBody{}), wecom.ErrCodeInvalidParam)
	wantCode(t, c.call(wecom.CmdEnterEventReply, reqID, wecom.EnterEventBody{Version: "0.5.0"}), 0)
	wantCode(t, c.call(wecom.CmdEnterEventReply, reqID, wecom.EnterEventBody{Version: "0.5.1"}), wecom.ErrCodeInvalidReqID) // once
	if st := h.stats(bot1); st.ReportedVersion != "0.5.0" {
		t.Fatalf("reported version %q, want 0.5.0", st.ReportedVersion)
	}

	// Too late.
	h.event(EventRequest{BotID: bot1, UserID: "bob", EventType: wecom.EventEnterCheckUpdate})
	late, _ := c.eventCallback()
	h.clock.Advance(5*time.Second + time.Millisecond)
	wantCode(t, c.call(wecom.CmdEnterEventReply, late, wecom.EnterEventBody{Version: "9.9.9"}), wecom.ErrCodeInvalidReqID)
	if st := h.stats(bot1); st.ReportedVersion != "0.5.0" {
		t.Fatalf("reported version %q after a late reply, want 0.5.0", st.ReportedVersion)
	}
	if tr := h.srv.Transcript(bot1, "alice"); len(tr) != 1 { // the question and nothing else
		t.Fatalf("a version reply is shown to no user: transcript %+v", tr)
	}
}
