package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// Event is a user action posted to the simulator (POST /control/events):
// a click's fields are EventKey, TaskID and Selected; MsgID, if it names
// an event posted before, replays it.
type Event struct {
	BotID     string `json:"bot_id"`
	UserID    string `json:"user_id,omitempty"`
	EventType string `json:"eventtype,omitempty"`
	EventKey  string `json:"event_key,omitempty"`
	TaskID    string `json:"task_id,omitempty"`
	Selected  []struct {
		QuestionKey string   `json:"question_key"`
		OptionIDs   []string `json:"option_ids"`
	} `json:"selected,omitempty"`
	MsgID string `json:"msgid,omitempty"`
}

// PostEvent posts ev; the answer says whether a connection took it.
func (c *Cluster) PostEvent(ev Event) (PostResult, error) {
	var r PostResult
	body, _ := json.Marshal(ev)
	resp, err := httpc.Post(c.SimHTTP+"/control/events", "application/json", bytes.NewReader(body))
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("POST /control/events: %s: %s", resp.Status, data)
	}
	return r, json.Unmarshal(data, &r)
}
