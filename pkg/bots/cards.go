package bots

import (
	"context"
	"encoding/json"

	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/ai"
)

// AnswerCard hands a click on a card to bot's backend, if it answers
// clicks at once (ai.CardResponder); otherwise access.ErrClickQueued:
// the click is a task, the backend's next turn (access.Cards).
func (b *Live) AnswerCard(ctx context.Context, click access.CardClick) (json.RawMessage, error) {
	cr := cardResponder(b.state(click.Bot).backend)
	if cr == nil {
		return nil, access.ErrClickQueued
	}
	var selected []ai.Selection
	for _, s := range click.Selected {
		selected = append(selected, ai.Selection{QuestionKey: s.QuestionKey, OptionIDs: s.OptionIDs})
	}
	return cr.CardEvent(ctx, ai.CardEvent{TaskID: click.TaskID, Bot: click.Bot, Chat: click.Chat, User: click.User,
		CardTaskID: click.CardTaskID, EventKey: click.EventKey, Selected: selected, Card: click.Card})
}

// cardResponder is the backend that answers clicks: b itself, or the
// first of the backends b chains (a fallback chain's Backends) that does;
// nil when none does.
func cardResponder(b ai.Backend) ai.CardResponder {
	if cr, ok := b.(ai.CardResponder); ok {
		return cr
	}
	if chain, ok := b.(interface{ Backends() []ai.Backend }); ok {
		for _, link := range chain.Backends() {
			if cr := cardResponder(link); cr != nil {
				return cr
			}
		}
	}
	return nil
}
