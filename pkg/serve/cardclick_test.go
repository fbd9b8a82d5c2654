package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// cardAgent is an http agent whose answer to a question ends with a card
// that waits for a person, and whose answer to a click names the choice.
func cardAgent(t *testing.T) *agentServer {
	return cardAgentWith(t, roomButtons)
}

// Cards the agents end their first answer with: buttons, and a vote.
const (
	roomButtons = `{"card_type": "button_interaction", "main_title": {"title": "Room"}, "button_list": [{"text": "Big room", "key": "big"}, {"text": "Small room", "key": "small"}]}`
	roomVote    = `{"card_type": "vote_interaction", "main_title": {"title": "Rooms"}, "checkbox": {"question_key": "room", "mode": 1, "option_list": [{"id": "big", "text": "Big room"}, {"id": "small", "text": "Small room"}]}, "submit_button": {"text": "Book", "key": "book"}}`
)

// cardAgentWith is cardAgent whose card is card.
func cardAgentWith(t *testing.T, card string) *agentServer {
	return newAgentServer(t, func(w http.ResponseWriter, body map[string]any, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		if ev, ok := body["event"].(map[string]any); ok {
			fmt.Fprintf(w, "data: {\"text\": \"agent took %v for %v\"}\n\n", ev["event_key"], ev["task_id"])
			fmt.Fprintf(w, "data: {\"done\": true}\n\n")
			return
		}
		fmt.Fprintf(w, "data: {\"text\": \"which room?\"}\n\n")
		fmt.Fprintf(w, "data: {\"reply\": {\"card\": %s}}\n\n", card)
		fmt.Fprintf(w, "data: {\"done\": true}\n\n")
	})
}

// clickRequests are the agent's requests that carried a click.
func clickRequests(a *agentServer) []map[string]any {
	var out []map[string]any
	for _, b := range a.requests() {
		if b["event"] != nil {
			out = append(out, b)
		}
	}
	return out
}

// askForCard posts a question to bob and returns the task_id of the card
// the agent's answer ended with.
func askForCard(t *testing.T, sim *wecomsim.Server) string {
	t.Helper()
	if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "bob", Text: "book a room"}); err != nil {
		t.Fatal(err)
	}
	var card struct {
		TaskID string `json:"task_id"`
	}
	testwait.Eventually(t, time.Minute, "the answer with its card", func() bool {
		for _, m := range botReplies(sim, "bob") {
			if m.Finished && m.Card != "" && json.Unmarshal([]byte(m.Card), &card) == nil {
				return true
			}
		}
		return false
	})
	return card.TaskID
}

// count is how many of bob's bot messages satisfy ok.
func count(sim *wecomsim.Server, ok func(wecomsim.TranscriptEntry) bool) int {
	k := 0
	for _, m := range botReplies(sim, "bob") {
		if ok(m) {
			k++
		}
	}
	return k
}

func tookUpdate(m wecomsim.TranscriptEntry) bool {
	return m.Kind == "update_template_card" && strings.Contains(m.Content, "已选择：Big room")
}

func tookAnswer(owner string) func(wecomsim.TranscriptEntry) bool {
	return func(m wecomsim.TranscriptEntry) bool {
		return m.Finished && strings.Contains(m.Content, "agent took big for "+owner)
	}
}

// TestCardClickAnsweredOnceThroughResend: a click on an http agent's card
// updates the card at once (botctl's update: the choice taken), reaches
// the agent once as "event" beside the conversation's fields, and its
// answer is pushed; the same click sent again by WeCom updates the card
// again and reaches the agent no more.
func TestCardClickAnsweredOnceThroughResend(t *testing.T) {
	t.Parallel()
	agent := cardAgent(t)
	e, ns := startEtcd(t), startNATS(t)
	sim, addr := startSimServer(t)
	cfg := nodeConfig(t, "ws://"+addr+"/", e, ns.ClientURL())
	cfg.AI.Kind = config.AIKindHTTP
	cfg.AI.HTTP.URL = agent.srv.URL + "/webhook/x"
	if _, err := startNode(t, cfg); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	cardTaskID := askForCard(t, sim)
	res, err := sim.PostEvent(wecomsim.EventRequest{BotID: "b1", UserID: "bob", EventType: "template_card_event", EventKey: "big", TaskID: cardTaskID})
	if err != nil || !res.Delivered {
		t.Fatalf("click: %+v %v", res, err)
	}
	testwait.Eventually(t, time.Minute, "the card updated and the click answered", func() bool {
		return count(sim, tookUpdate) == 1 && count(sim, tookAnswer(cardTaskID)) == 1
	})
	again, err := sim.PostEvent(wecomsim.EventRequest{BotID: "b1", MsgID: res.MsgID})
	if err != nil || !again.Delivered || again.ReqID == res.ReqID {
		t.Fatalf("the click sent again: %+v %v", again, err)
	}
	testwait.Eventually(t, time.Minute, "the click sent again updated the card", func() bool { return count(sim, tookUpdate) == 2 })
	clicks := clickRequests(agent)
	if len(clicks) != 1 || count(sim, tookAnswer(cardTaskID)) != 1 {
		t.Fatalf("the agent was asked %d times about the click, bob answered %d times: %+v", len(clicks), count(sim, tookAnswer(cardTaskID)), botReplies(sim, "bob"))
	}
	ev, _ := json.Marshal(clicks[0]["event"])
	if want := fmt.Sprintf(`{"event_key":"big","selected":[],"task_id":%q,"type":"card_click"}`, cardTaskID); string(ev) != want ||
		clicks[0]["question"] != "Big room" || clicks[0]["chat"] != "bob" || clicks[0]["user"] != "bob" || clicks[0]["msgid"] != res.MsgID {
		t.Fatalf("the agent got %v, event %s want %s", clicks[0], ev, want)
	}
	if st, _ := sim.Stats("b1"); st.InvalidReqIDs != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestCardClickWithChoices: a click on a vote card reaches the agent with
// the options chosen (event.selected) and the choice in words as the
// question; the card is updated with the choice.
func TestCardClickWithChoices(t *testing.T) {
	t.Parallel()
	agent := cardAgentWith(t, roomVote)
	e, ns := startEtcd(t), startNATS(t)
	sim, addr := startSimServer(t)
	cfg := nodeConfig(t, "ws://"+addr+"/", e, ns.ClientURL())
	cfg.AI.Kind = config.AIKindHTTP
	cfg.AI.HTTP.URL = agent.srv.URL + "/webhook/x"
	if _, err := startNode(t, cfg); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	cardTaskID := askForCard(t, sim)
	res, err := sim.PostEvent(wecomsim.EventRequest{BotID: "b1", UserID: "bob", EventType: "template_card_event", EventKey: "book", TaskID: cardTaskID,
		CardType: "vote_interaction", Selected: []wecom.Selection{{QuestionKey: "room", OptionIDs: []string{"big", "small"}}}})
	if err != nil || !res.Delivered {
		t.Fatalf("click: %+v %v", res, err)
	}
	took := func(m wecomsim.TranscriptEntry) bool {
		return m.Kind == "update_template_card" && strings.Contains(m.Content, "已选择：Big room、Small room（Book）")
	}
	answered := func(m wecomsim.TranscriptEntry) bool {
		return m.Finished && strings.Contains(m.Content, "agent took book for "+cardTaskID)
	}
	testwait.Eventually(t, time.Minute, "the card updated and the click answered", func() bool {
		return count(sim, took) == 1 && count(sim, answered) == 1
	})
	clicks := clickRequests(agent)
	if len(clicks) != 1 {
		t.Fatalf("the agent was asked %d times about the click", len(clicks))
	}
	ev, _ := json.Marshal(clicks[0]["event"])
	if want := fmt.Sprintf(`{"event_key":"book","selected":[{"option_ids":["big","small"],"question_key":"room"}],"task_id":%q,"type":"card_click"}`, cardTaskID); string(ev) != want ||
		clicks[0]["question"] != "Big room、Small room（Book）" {
		t.Fatalf("the agent got %v, event %s want %s", clicks[0], ev, want)
	}
}

// TestCardClickAfterFailover: the leader that sent the card stops; a
// click made then is handled by the next leader, from what JetStream
// holds (the card's owner task and its output), exactly once.
func TestCardClickAfterFailover(t *testing.T) {
	t.Parallel()
	agent := cardAgent(t)
	e, ns := startEtcd(t), startNATS(t)
	sim, addr := startSimServer(t)
	nodeCfg := func(node string) config.Config {
		cfg := nodeConfig(t, "ws://"+addr+"/", e, ns.ClientURL())
		cfg.NodeID = node
		cfg.AI.Kind = config.AIKindHTTP
		cfg.AI.HTTP.URL = agent.srv.URL + "/webhook/x"
		return cfg
	}
	n1, err := startNode(t, nodeCfg("n1"))
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "n1 connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	cardTaskID := askForCard(t, sim)
	if _, err := startNode(t, nodeCfg("n2")); err != nil {
		t.Fatal(err)
	}
	if err := n1.Stop(); err != nil {
		t.Fatalf("n1 stopped with %v", err)
	}
	var res wecomsim.EventResult
	testwait.Eventually(t, 2*time.Minute, "the click delivered to the next leader", func() bool {
		res, err = sim.PostEvent(wecomsim.EventRequest{BotID: "b1", UserID: "bob", EventType: "template_card_event", EventKey: "big", TaskID: cardTaskID, MsgID: res.MsgID})
		return err == nil && res.Delivered
	})
	testwait.Eventually(t, 2*time.Minute, "the card updated and the click answered by n2", func() bool {
		return count(sim, tookUpdate) >= 1 && count(sim, tookAnswer(cardTaskID)) == 1
	})
	if k := len(clickRequests(agent)); k != 1 {
		t.Fatalf("the agent was asked %d times about the click", k)
	}
}
