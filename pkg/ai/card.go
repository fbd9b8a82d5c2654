package ai

// A card that waits for a person: the backend's answer ends with a card
// (Reply.Card), and the user's click on it comes back as a task of its
// own, answered by the same backend as its next turn. What each backend
// makes of the click:
//
//   - http: the POST carries "event": {"type": "card_click", "task_id",
//     "event_key", "selected"} beside the conversation's fields, and the
//     question is the choice in words; the answer is read as any other.
//   - dify: the choice is the query, and inputs name it (card_event_key,
//     card_selected, card_task_id).
//   - openai, exec, demo: the choice is the next user turn.

import "strings"

// EventCardClick is Event.Type of a click on a card.
const EventCardClick = "card_click"

// Event is what the user did instead of writing.
type Event struct {
	// Type is EventCardClick.
	Type string `json:"type"`
	// TaskID is botctl's task whose answer carried the card (the
	// Idempotency-Key that answer was asked under).
	TaskID string `json:"task_id"`
	// EventKey is the key of the button clicked; Selected the options
	// chosen on a vote or multiple-choice card ([] for a button).
	EventKey string   `json:"event_key"`
	Selected []string `json:"selected"`
}

// difyInputs is what a dify query answering ev carries in inputs: the
// choice, for a Chatflow's start node to branch on (a variable Dify's app
// does not declare is ignored by Dify).
func difyInputs(ev *Event) map[string]any {
	if ev == nil {
		return map[string]any{}
	}
	return map[string]any{"card_task_id": ev.TaskID, "card_event_key": ev.EventKey, "card_selected": strings.Join(ev.Selected, ",")}
}
