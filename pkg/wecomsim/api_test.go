package wecomsim

import (
	"encoding/json"
	"errors"
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
		c.WelcomeWindow != 5*time.Second || c.UpdateWindow != 5*time.Second || c.MaxFrameBytes != wecom.MaxFrameBytes || c.Now == nil || c.RelaxReqIDBinding {
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

	res := h.event(EventRequest{BotID: bot1, UserID: "bob", EventType: wecom.EventFeedback, ChatType: "group", ChatID: "g1"})
	fbReq, ev := c.eventCallback()
	if !res.Delivered || fbReq != res.ReqID || ev.Event.EventType != wecom.EventFeedback || ev.ChatID != "g1" {
		t.Fatalf("feedback event %+v %+v", res, ev)
	}
	// A feedback event cannot be answered with a welcome or an update.
	wantCode(t, c.call(wecom.CmdRespondWelcomeMsg, fbReq, wecom.WelcomeBody{MsgType: "text", Text: &wecom.TextContent{Content: "x"}}), wecom.ErrCodeInvalidReqID)
	wantCode(t, c.call(wecom.CmdRespondUpdateMsg, fbReq, wecom.UpdateBody{ResponseType: wecom.ResponseTypeUpdateTemplateCard, TemplateCard: card}), wecom.ErrCodeInvalidReqID)
}
