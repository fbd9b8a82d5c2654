package ai

// A card that waits for a person: the backend's answer ends with a card
// (Reply.Card), and the user's click on it comes back as a task of its
// own, answered by the same backend as its next turn. What each backend
// makes of the click:
//
//   - http: the POST carries "event": {"type": "card_click", "task_id",
//     "event_key", "selected"} beside the conversation's fields, and the
//     question is the choice in words; the answer is read as any other.
//     selected is [] for a plain button, else one entry a question:
//     [{"question_key": "room", "option_ids": ["big"]}].
//   - dify: the choice is the query, and inputs name it (card_task_id,
//     card_event_key; card_selected, the option ids chosen joined by
//     ","; card_selected_items, selected as JSON text).
//   - openai, exec, demo: the choice is the next user turn (the button's
//     text, and the options' texts on a card with choices).

import (
	"encoding/json"
	"strings"
)

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
	// chosen on a card with choices (vote_interaction,
	// multiple_interaction, button_selection), one entry a question, in
	// WeCom's order ([] for a plain button).
	EventKey string      `json:"event_key"`
	Selected []Selection `json:"selected"`
}

// Selection is one question of a card answered: the question's
// question_key and the ids of the options chosen, as the card named
// them.
type Selection struct {
	QuestionKey string   `json:"question_key"`
	OptionIDs   []string `json:"option_ids"`
}

// difyInputs is what a dify query answering ev carries in inputs: the
// choice, for a Chatflow's start node to branch on (a variable Dify's app
// does not declare is ignored by Dify).
func difyInputs(ev *Event) map[string]any {
	if ev == nil {
		return map[string]any{}
	}
	var ids []string
	for _, s := range ev.Selected {
		ids = append(ids, s.OptionIDs...)
	}
	items := ev.Selected
	if items == nil {
		items = []Selection{}
	}
	raw, _ := json.Marshal(items) // strings only: cannot fail
	return map[string]any{"card_task_id": ev.TaskID, "card_event_key": ev.EventKey,
		"card_selected": strings.Join(ids, ","), "card_selected_items": string(raw)}
}
