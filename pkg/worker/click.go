package worker

import (
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/task"
)

// clickEvent is the event a task answering a card click hands its
// backend: the card's owner task and the choice (nil for a message).
// Selected is [] for a plain button, never null.
func clickEvent(c *task.Click) *ai.Event {
	if c == nil {
		return nil
	}
	selected := make([]ai.Selection, 0, len(c.Selected))
	for _, s := range c.Selected {
		selected = append(selected, ai.Selection{QuestionKey: s.QuestionKey, OptionIDs: s.OptionIDs})
	}
	return &ai.Event{Type: ai.EventCardClick, TaskID: c.Owner, EventKey: c.EventKey, Selected: selected}
}
