package task

// A click on a card that waits for a person is a task of its own: its
// msgid is the click event's (so WeCom's resend of the same click finds
// the same task, and the queue's dedupe refuses a second publish), its
// subject the conversation's (the click waits for the conversation's
// task before it, as a message does), and its record names the task
// whose answer carried the card and the choice made.

import "github.com/botctl/botctl/pkg/wecom"

// Click is the card click a task answers.
type Click struct {
	// Owner is the task whose answer carried the card.
	Owner string `json:"owner"`
	// CardTaskID is the card's task_id as WeCom sent it back (Owner, then
	// '@' and the backend's own task_id when it gave one: CardTaskID).
	CardTaskID string `json:"card_task_id"`
	// EventKey is the key of the button clicked; Selected the options
	// chosen on a card with choices, one entry a question (none for a
	// plain button).
	EventKey string            `json:"event_key"`
	Selected []wecom.Selection `json:"selected,omitempty"`
}
