package wecomsim

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
	"go.uber.org/goleak"
)

func TestGoAPIErrors(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	if err := h.srv.AddBot(bot1, "x"); !errors.Is(err, ErrBotExists) {
		t.Fatalf("AddBot twice: %v", err)
	}
	if err := h.srv.AddBot("", "x"); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("AddBot without id: %v", err)
	}
	if err := h.srv.AddBot("b", ""); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("AddBot without secret: %v", err)
	}
	if _, err := h.srv.Stats("ghost"); !errors.Is(err, ErrUnknownBot) {
		t.Fatalf("Stats: %v", err)
	}
	if _, err := h.srv.PostMessage(MessageRequest{BotID: "ghost", UserID: "u", Text: "x"}); !errors.Is(err, ErrUnknownBot) {
		t.Fatalf("PostMessage: %v", err)
	}
	if _, err := h.srv.History(HistoryQuery{BotID: bot1, Limit: -1}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("History: %v", err)
	}
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: "explode"}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Fault: %v", err)
	}
	if tr := h.srv.Transcript("ghost", "u"); tr != nil {
		t.Fatalf("Transcript of an unknown bot: %+v", tr)
	}
}

func TestConfigDefaultsAndValidate(t *testing.T) {
	c := Config{}.withDefaults()
	if c.StreamWindow != 6*time.Minute || c.RateLimit != 30 || c.RateWindow != time.Minute ||
		c.WelcomeWindow != 5*time.Second || c.UpdateWindow != 5*time.Second || c.MaxFrameBytes != DefaultMaxFrameBytes || c.Now == nil || c.RelaxReqIDBinding {
		t.Fatalf("defaults %+v", c)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Config{RateWindow: -time.Second}).Validate(); err == nil {
		t.Fatal("negative RateWindow accepted")
	}
}

func TestWelcomeTemplateCardAndFeedbackEvent(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	h.event(EventRequest{BotID: bot1, UserID: "alice", EventType: wecom.EventEnterChat})
	reqID, _ := c.eventCallback()
	card := json.RawMessage(`{"card_type": "text_notice"}`)
	wantCode(t, c.call(wecom.CmdRespondWelcomeMsg, reqID, wecom.WelcomeBody{MsgType: "template_card", TemplateCard: card}), 0)
	tr := h.srv.Transcript(bot1, "alice")
	if len(tr) != 1 || tr[0].Kind != "welcome" || tr[0].Content != `{"card_type":"text_notice"}` {
		t.Fatalf("transcript %+v", tr)
	}

	// Feedback is on a reply whose first frame carried a feedback.id.
	qMsg := h.post(MessageRequest{BotID: bot1, UserID: "bob", Text: "q", ChatType: "group", ChatID: "g1"})
	qReq, _ := c.msgCallback()
	first := streamBody("s-fb", "answer", true)
	first.Stream.Feedback = &wecom.Feedback{ID: "fb-1"}
	wantCode(t, c.call(wecom.CmdRespondMsg, qReq, first), 0)
	if tr := h.srv.Transcript(bot1, "g1"); len(tr) != 2 || tr[1].FeedbackID != "fb-1" {
		t.Fatalf("transcript %+v", tr)
	}
	for _, bad := range []EventRequest{
		{BotID: bot1, UserID: "bob", EventType: wecom.EventFeedback, ChatType: "group", ChatID: "g1", FeedbackType: 1},
		{BotID: bot1, UserID: "bob", EventType: wecom.EventFeedback, ChatType: "group", ChatID: "g1", FeedbackID: "fb-nope", FeedbackType: 1},
		{BotID: bot1, UserID: "bob", EventType: wecom.EventFeedback, ChatType: "group", ChatID: "g1", FeedbackID: "fb-1", FeedbackType: 4},
	} {
		if _, err := h.srv.PostEvent(bad); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("feedback %+v: %v, want an invalid request", bad, err)
		}
	}
	res := h.event(EventRequest{BotID: bot1, UserID: "bob", EventType: wecom.EventFeedback, ChatType: "group", ChatID: "g1",
		FeedbackID: "fb-1", FeedbackType: wecom.FeedbackInaccurate, FeedbackContent: "too short", InaccurateReasons: []int{2}})
	fbReq, ev := c.eventCallback()
	if !res.Delivered || fbReq != res.ReqID || ev.Event.EventType != wecom.EventFeedback || ev.ChatID != "g1" {
		t.Fatalf("feedback event %+v %+v", res, ev)
	}
	if fb := ev.Event.Feedback; fb == nil || fb.ID != "fb-1" || fb.Type != 2 || fb.Content != "too short" || len(fb.InaccurateReasons) != 1 {
		t.Fatalf("feedback_event body %+v", ev.Event.Feedback)
	}
	// Replaying its msgid delivers the same event again with a new req_id;
	// a message's msgid is no event's.
	again := h.event(EventRequest{BotID: bot1, MsgID: res.MsgID})
	againReq, evAgain := c.eventCallback()
	if !again.Delivered || again.MsgID != res.MsgID || againReq != again.ReqID || againReq == fbReq || evAgain.MsgID != ev.MsgID ||
		evAgain.CreateTime != ev.CreateTime || evAgain.ChatID != "g1" || evAgain.Event.Feedback == nil || evAgain.Event.Feedback.ID != "fb-1" ||
		evAgain.Event.Feedback.Content != "too short" {
		t.Fatalf("replayed event %+v %+v, want %+v again", again, evAgain, ev)
	}
	named := h.event(EventRequest{BotID: bot1, UserID: "bob", EventType: wecom.EventEnterChat, MsgID: "ev-named"})
	if _, evNamed := c.eventCallback(); named.MsgID != "ev-named" || evNamed.MsgID != "ev-named" {
		t.Fatalf("event posted with an unused msgid: %+v %+v", named, evNamed)
	}
	if _, err := h.srv.PostEvent(EventRequest{BotID: bot1, MsgID: qMsg.MsgID}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("replay of a message's msgid as an event: %v, want an invalid request", err)
	}
	// A feedback.id over 256 bytes is refused.
	h.post(MessageRequest{BotID: bot1, UserID: "bob", Text: "q2", ChatType: "group", ChatID: "g1"})
	q2, _ := c.msgCallback()
	long := streamBody("s-fb2", "answer", false)
	long.Stream.Feedback = &wecom.Feedback{ID: strings.Repeat("x", wecom.MaxFeedbackIDBytes+1)}
	wantCode(t, c.call(wecom.CmdRespondMsg, q2, long), wecom.ErrCodeInvalidParam)
	// A feedback event cannot be answered with a welcome or an update.
	wantCode(t, c.call(wecom.CmdRespondWelcomeMsg, fbReq, wecom.WelcomeBody{MsgType: "text", Text: &wecom.TextContent{Content: "x"}}), wecom.ErrCodeInvalidReqID)
	wantCode(t, c.call(wecom.CmdRespondUpdateMsg, fbReq, wecom.UpdateBody{ResponseType: wecom.ResponseTypeUpdateTemplateCard, TemplateCard: card}), wecom.ErrCodeInvalidReqID)
}
