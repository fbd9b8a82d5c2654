package worker

import (
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/task"
)

// clickEvent is the event a task answering a card click hands its
// backend: the card's owner task and the choice (nil for a message).
func clickEvent(c *task.Click) *ai.Event {
	if c == nil {
		return nil
	}
	selected := c.Selected
	if selected == nil {
		selected = []string{}
	}
	return &ai.Event{Type: ai.EventCardClick, TaskID: c.Owner, EventKey: c.EventKey, Selected: selected}
}
