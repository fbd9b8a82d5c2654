package wecom

import "encoding/json"

// TemplateCardEvent is event.template_card_event of a click on a template
// card, as WeCom sends it (the official OpenClaw plugin's types):
//
//	{"card_type": "vote_interaction", "event_key": "submit", "task_id": "t_1",
//	 "selected_items": {"selected_item": [
//	   {"question_key": "room", "option_ids": {"option_id": ["big"]}}]}}
//
// selected_items is there on cards with choices (vote_interaction,
// multiple_interaction, button_selection); a plain button has none.
type TemplateCardEvent struct {
	CardType      string         `json:"card_type,omitempty"`
	EventKey      string         `json:"event_key,omitempty"`
	TaskID        string         `json:"task_id,omitempty"`
	SelectedItems *SelectedItems `json:"selected_items,omitempty"`
}

// SelectedItems are the questions of a card the user answered.
type SelectedItems struct {
	Item []SelectedItem `json:"selected_item"`
}

// SelectedItem is one question's answer: its question_key and the ids of
// the options chosen.
type SelectedItem struct {
	QuestionKey string    `json:"question_key"`
	OptionIDs   OptionIDs `json:"option_ids"`
}

// OptionIDs wraps the option ids as WeCom nests them.
type OptionIDs struct {
	OptionID []string `json:"option_id"`
}

// Selection is one question's answer, flattened: what a click carries on
// past the connection.
type Selection struct {
	QuestionKey string   `json:"question_key"`
	OptionIDs   []string `json:"option_ids"`
}

// Selections are the answers a click carries, in WeCom's order: none
// for a plain button, nor for an event that is not a click. A question
// without a key or without an option chosen is left out.
func (e *Event) Selections() []Selection {
	if e.TemplateCard == nil || e.TemplateCard.SelectedItems == nil {
		return nil
	}
	var out []Selection
	for _, it := range e.TemplateCard.SelectedItems.Item {
		var ids []string
		for _, id := range it.OptionIDs.OptionID {
			if id != "" {
				ids = append(ids, id)
			}
		}
		if it.QuestionKey == "" || len(ids) == 0 {
			continue
		}
		out = append(out, Selection{QuestionKey: it.QuestionKey, OptionIDs: ids})
	}
	return out
}

// NewTemplateCardEvent is the event of a click: eventtype
// template_card_event, the click in template_card_event as WeCom sends
// it (EventKey and TaskID stay empty: WeCom does not repeat them at the
// event's top level). selected may be nil (a plain button).
func NewTemplateCardEvent(cardType, eventKey, taskID string, selected []Selection) Event {
	tc := &TemplateCardEvent{CardType: cardType, EventKey: eventKey, TaskID: taskID}
	if len(selected) > 0 {
		items := make([]SelectedItem, 0, len(selected))
		for _, s := range selected {
			items = append(items, SelectedItem{QuestionKey: s.QuestionKey, OptionIDs: OptionIDs{OptionID: s.OptionIDs}})
		}
		tc.SelectedItems = &SelectedItems{Item: items}
	}
	return Event{EventType: EventTemplateCardEvent, TemplateCard: tc}
}

// UnmarshalJSON reads an event and fills EventKey and TaskID from
// template_card_event when the event's top level has them not.
func (e *Event) UnmarshalJSON(data []byte) error {
	type plain Event
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	if tc := p.TemplateCard; tc != nil {
		if p.EventKey == "" {
			p.EventKey = tc.EventKey
		}
		if p.TaskID == "" {
			p.TaskID = tc.TaskID
		}
	}
	*e = Event(p)
	return nil
}
