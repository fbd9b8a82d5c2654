package serve

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// botReplies is what bot b1 sent user: its entries in the transcript.
func botReplies(sim *wecomsim.Server, user string) []wecomsim.TranscriptEntry {
	var out []wecomsim.TranscriptEntry
	for _, m := range sim.Transcript("b1", user) {
		if m.From == "bot" {
			out = append(out, m)
		}
	}
	return out
}

// A demo answer to a question asking for an image ends with the image on
// its finishing frame (msg_item: base64 and md5 of a PNG, which the
// simulator checks), and the text is the answer's.
func TestReplyImageOnTheFinishingFrame(t *testing.T) {
	t.Parallel()
	sim, addr := startSimServer(t)
	e, ns := startEtcd(t), startNATS(t)
	cfg := nodeConfig(t, "ws://"+addr+"/", e, ns.ClientURL())
	cfg.AI.Demo.AnswerTime = 200 * time.Millisecond
	if _, err := startNode(t, cfg); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "ann", Text: "draw an image please"}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "the answer finished with its image", func() bool {
		for _, m := range botReplies(sim, "ann") {
			if m.Kind == "stream" && m.Finished && m.Images == 1 && strings.Contains(m.Content, "You asked: draw an image please") {
				return true
			}
		}
		return false
	})
}

// serve --demo end to end: "card" gets a template card with the final
// frame and "file" an uploaded file after it; a click on the card
// (template_card_event, naming the card's task_id) reaches the task's
// backend, whose updated card replaces it (aibot_respond_update_msg,
// within the simulator's update window).
func TestReplyCardAndItsClickAnsweredWithAnUpdate(t *testing.T) {
	t.Parallel()
	sim, addr := startSimServer(t)
	e, ns := startEtcd(t), startNATS(t)
	cfg := nodeConfig(t, "ws://"+addr+"/", e, ns.ClientURL())
	cfg.AI.Demo.AnswerTime = 200 * time.Millisecond
	if _, err := startNode(t, cfg); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "bob", Text: "a card and a file please"}); err != nil {
		t.Fatal(err)
	}
	var card struct {
		TaskID string `json:"task_id"`
	}
	testwait.Eventually(t, time.Minute, "the answer with its card, then the file", func() bool {
		bot := botReplies(sim, "bob")
		if len(bot) != 2 || !bot[0].Finished || bot[0].Card == "" || bot[1].Kind != "file" {
			return false
		}
		return json.Unmarshal([]byte(bot[0].Card), &card) == nil
	})
	if !strings.HasPrefix(card.TaskID, "t_") {
		t.Fatalf("card task_id %q: want the task's id", card.TaskID)
	}
	res, err := sim.PostEvent(wecomsim.EventRequest{BotID: "b1", UserID: "bob", EventType: "template_card_event", EventKey: ai.DemoCardYes, TaskID: card.TaskID})
	if err != nil || !res.Delivered {
		t.Fatalf("click: %+v %v", res, err)
	}
	testwait.Eventually(t, time.Minute, "the card updated", func() bool {
		for _, m := range botReplies(sim, "bob") {
			if m.Kind == "update_template_card" && strings.Contains(m.Content, "You chose: Yes") && strings.Contains(m.Content, card.TaskID) {
				return true
			}
		}
		return false
	})
	if st, _ := sim.Stats("b1"); st.InvalidReqIDs != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A bot's welcome card (access.welcome_card, per bot) answers enter_chat
// instead of the welcome text.
func TestWelcomeCard(t *testing.T) {
	t.Parallel()
	sim, addr := startSimServer(t)
	e, ns := startEtcd(t), startNATS(t)
	cfg := nodeConfig(t, "ws://"+addr+"/", e, ns.ClientURL())
	cfg.Access.WelcomeText = "hello in words"
	cfg.Bots[0].Settings = settings(t, `access: {welcome_card: '{"card_type":"text_notice","main_title":{"title":"欢迎"}}'}`)
	if _, err := startNode(t, cfg); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	if res, err := sim.PostEvent(wecomsim.EventRequest{BotID: "b1", UserID: "cat", EventType: "enter_chat"}); err != nil || !res.Delivered {
		t.Fatalf("enter_chat: %+v %v", res, err)
	}
	testwait.Eventually(t, time.Minute, "the welcome card", func() bool {
		for _, m := range botReplies(sim, "cat") {
			if m.Kind == "welcome" && strings.Contains(m.Content, `"card_type":"text_notice"`) {
				return true
			}
		}
		return false
	})
}
