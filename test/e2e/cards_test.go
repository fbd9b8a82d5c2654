package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/test/e2e/cluster"
)

// voteAgent is an http agent whose answer to a question ends with a vote
// card, and whose answer to a click names the button and the card's
// task; it keeps every click it was asked about.
type voteAgent struct {
	srv    *httptest.Server
	mu     sync.Mutex
	clicks []map[string]any
}

func newVoteAgent(t *testing.T) *voteAgent {
	a := &voteAgent{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		if ev, ok := body["event"].(map[string]any); ok {
			a.mu.Lock()
			a.clicks = append(a.clicks, body)
			a.mu.Unlock()
			fmt.Fprintf(w, "data: {\"text\": \"agent took %v for %v\"}\n\n", ev["event_key"], ev["task_id"])
			fmt.Fprintf(w, "data: {\"done\": true}\n\n")
			return
		}
		fmt.Fprintf(w, "data: {\"text\": \"which rooms?\"}\n\n")
		fmt.Fprintf(w, "data: {\"reply\": {\"card\": {\"card_type\": \"vote_interaction\", \"main_title\": {\"title\": \"Rooms\"}, "+
			"\"checkbox\": {\"question_key\": \"room\", \"mode\": 1, \"option_list\": [{\"id\": \"big\", \"text\": \"Big room\"}, {\"id\": \"small\", \"text\": \"Small room\"}]}, "+
			"\"submit_button\": {\"text\": \"Book\", \"key\": \"book\"}}}}\n\n")
		fmt.Fprintf(w, "data: {\"done\": true}\n\n")
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *voteAgent) asked() []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]map[string]any(nil), a.clicks...)
}

// The leader that sent a card is killed -9 before the user clicks it; the
// click, sent to the next leader's connection, reaches the agent that
// made the card once, with the options chosen, and the card is updated;
// WeCom sending the click again updates the card again and asks the
// agent no more.
func TestCardClickAfterLeaderKilled(t *testing.T) {
	t.Parallel()
	agent := newVoteAgent(t)
	c := newClusterWith(t, []string{"b1"}, []string{"--ai", "http", "--ai-http-url", agent.srv.URL + "/hook"})
	startNodes(t, c, 2)
	leader := c.Node(waitStable(t, c)["b1"])
	if _, err := c.PostMessage("b1", "bob", "book rooms"); err != nil {
		t.Fatal(err)
	}
	var cardTaskID string
	testwait.NoError(t, 60*time.Second, testwait.Every, "the answer with its card", func() error {
		tr, err := c.Transcript("b1", "bob")
		if err != nil {
			return err
		}
		for _, e := range tr {
			var card struct {
				TaskID string `json:"task_id"`
			}
			if e.From == "bot" && e.Finished && e.Card != "" && json.Unmarshal([]byte(e.Card), &card) == nil && card.TaskID != "" {
				cardTaskID = card.TaskID
				return nil
			}
		}
		return fmt.Errorf("transcript %+v", tr)
	})
	killed := time.Now()
	leader.Proc.Kill()
	if _, err := c.WaitSubscribed("b1", killed, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	click := cluster.Event{BotID: "b1", UserID: "bob", EventType: "template_card_event", EventKey: "book", TaskID: cardTaskID}
	click.Selected = append(click.Selected, struct {
		QuestionKey string   `json:"question_key"`
		OptionIDs   []string `json:"option_ids"`
	}{"room", []string{"big"}})
	var res cluster.PostResult
	testwait.NoError(t, 60*time.Second, testwait.Every, "the click delivered to the next leader", func() error {
		r, err := c.PostEvent(click)
		if err != nil {
			return err
		}
		res, click = r, cluster.Event{BotID: "b1", MsgID: r.MsgID} // again: the same click
		if !r.Delivered {
			return fmt.Errorf("not delivered: %+v", r)
		}
		return nil
	})
	count := func(ok func(cluster.TranscriptEntry) bool) int {
		tr, err := c.Transcript("b1", "bob")
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for _, e := range tr {
			if e.From == "bot" && ok(e) {
				k++
			}
		}
		return k
	}
	updated := func(e cluster.TranscriptEntry) bool {
		return e.Kind == "update_template_card" && strings.Contains(e.Content, "已选择：Big room（Book）")
	}
	answered := func(e cluster.TranscriptEntry) bool {
		return (e.Finished || e.Kind == "markdown") && strings.Contains(e.Content, "agent took book for "+cardTaskID)
	}
	testwait.NoError(t, 120*time.Second, testwait.Every, "the card updated and the click answered", func() error {
		if u, a := count(updated), count(answered); u < 1 || a != 1 {
			return fmt.Errorf("%d updates, %d answers", u, a)
		}
		return nil
	})
	updates := count(updated)
	if again, err := c.PostEvent(cluster.Event{BotID: "b1", MsgID: res.MsgID}); err != nil || !again.Delivered {
		t.Fatalf("the click sent again: %+v %v", again, err)
	}
	testwait.NoError(t, 60*time.Second, testwait.Every, "the click sent again updated the card", func() error {
		if u := count(updated); u <= updates {
			return fmt.Errorf("%d updates", u)
		}
		return nil
	})
	clicks := agent.asked()
	if len(clicks) != 1 || count(answered) != 1 {
		t.Fatalf("the agent was asked %d times about the click, bob answered %d times", len(clicks), count(answered))
	}
	ev, _ := json.Marshal(clicks[0]["event"])
	if want := fmt.Sprintf(`{"event_key":"book","selected":[{"option_ids":["big"],"question_key":"room"}],"task_id":%q,"type":"card_click"}`, cardTaskID); string(ev) != want {
		t.Fatalf("the agent got event %s, want %s", ev, want)
	}
}
