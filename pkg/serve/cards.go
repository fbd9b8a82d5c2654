package serve

import (
	"context"
	"encoding/json"

	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/ai"
)

// AnswerCard hands a click on a card to bot's backend, if it answers
// clicks (ai.CardResponder); nil otherwise: the card stays as it is
// (access.Cards).
func (b *bots) AnswerCard(ctx context.Context, click access.CardClick) (json.RawMessage, error) {
	cr, ok := b.state(click.Bot).backend.(ai.CardResponder)
	if !ok {
		return nil, nil
	}
	return cr.CardEvent(ctx, ai.CardEvent{TaskID: click.TaskID, Bot: click.Bot, Chat: click.Chat, User: click.User,
		CardTaskID: click.CardTaskID, EventKey: click.EventKey, Card: click.Card})
}
