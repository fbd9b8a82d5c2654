package wecomsim

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/botctl/botctl/pkg/wecom"
	"go.uber.org/goleak"
)

// A click on a card with choices reaches the bot as WeCom sends it: the
// button, the card and the options chosen in event.template_card_event,
// nothing at the event's top level; a replay carries the same; the
// update names the card by the nested task_id.
func TestTemplateCardEventWithChoices(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()
	c := h.subscribe(bot1, secret1)

	var req EventRequest // as POST /control/events takes it
	if err := json.Unmarshal([]byte(`{"bot_id":"`+bot1+`","user_id":"bob","eventtype":"template_card_event","event_key":"book",
		"task_id":"t1","card_type":"vote_interaction","selected":[{"question_key":"room","option_ids":["big","small"]}]}`), &req); err != nil {
		t.Fatal(err)
	}
	res := h.event(req)
	want := `{"eventtype":"template_card_event","template_card_event":{"card_type":"vote_interaction","event_key":"book","task_id":"t1",` +
		`"selected_items":{"selected_item":[{"question_key":"room","option_ids":{"option_id":["big","small"]}}]}}}`
	for _, label := range []string{"the click", "the click sent again"} {
		f := c.callback(wecom.CmdEventCallback)
		var body struct {
			Event json.RawMessage `json:"event"`
		}
		if err := json.Unmarshal(f.Body, &body); err != nil || string(body.Event) != want {
			t.Fatalf("%s: event %s (%v)\nwant %s", label, body.Event, err, want)
		}
		card := json.RawMessage(`{"card_type":"vote_interaction","task_id":"t1"}`)
		wantCode(t, c.call(wecom.CmdRespondUpdateMsg, f.Headers.ReqID, wecom.UpdateBody{ResponseType: wecom.ResponseTypeUpdateTemplateCard, TemplateCard: card}), 0)
		if label == "the click" {
			h.event(EventRequest{BotID: bot1, MsgID: res.MsgID})
		}
	}
	for _, bad := range []EventRequest{
		{BotID: bot1, UserID: "bob", EventType: wecom.EventTemplateCardEvent, TaskID: "t1", Selected: []wecom.Selection{{OptionIDs: []string{"a"}}}},
		{BotID: bot1, UserID: "bob", EventType: wecom.EventTemplateCardEvent, TaskID: "t1", Selected: []wecom.Selection{{QuestionKey: "q"}}},
		{BotID: bot1, UserID: "bob", EventType: wecom.EventTemplateCardEvent, TaskID: "t1", Selected: []wecom.Selection{{QuestionKey: "q", OptionIDs: []string{""}}}},
		{BotID: bot1, UserID: "bob", EventType: wecom.EventEnterChat, Selected: []wecom.Selection{{QuestionKey: "q", OptionIDs: []string{"a"}}}},
		{BotID: bot1, UserID: "bob", EventType: wecom.EventEnterChat, CardType: "vote_interaction"},
	} {
		if _, err := h.srv.PostEvent(bad); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("%+v: %v, want an invalid request", bad, err)
		}
	}
}
