package access

// Cards: a click on a template card a task's reply carried
// (template_card_event) goes to the backend that answered the task, and
// the card it returns replaces the one clicked (aibot_respond_update_msg,
// within WeCom's 5 seconds of the click).
//
// The routing is the card's task_id: the worker gives every card the id
// of its task (task.CardTaskID), and the card itself is in that task's
// output in JetStream (task.Reply), so whichever node leads the bot when
// the user clicks finds the task, and the card, there.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
)

// CardClick is a click on a card of a task's reply.
type CardClick struct {
	Bot, TaskID, Chat, ChatType, User string
	// CardTaskID is the backend's own task_id of the card ("" none);
	// EventKey the key of the button clicked; Selected the options chosen
	// on a card with choices (none for a plain button).
	CardTaskID, EventKey string
	Selected             []wecom.Selection
	// Card is the card as it was sent.
	Card json.RawMessage
}

// Cards answers clicks with the card to show instead (nil: leave it).
// Serve's bots: the bot's AI backend, if it answers clicks.
type Cards interface {
	AnswerCard(ctx context.Context, click CardClick) (json.RawMessage, error)
}

// updateWindow is WeCom's: a card update is taken within 5 s of the
// click. The backend gets what is left of it, less a margin for the
// frame.
const updateWindow = 5 * time.Second

// cardEvent routes a template_card_event to its task's backend and sends
// the update it answers with.
func (a *Access) cardEvent(term *election.Term, c *wecom.Conn, reqID string, ev *wecom.EventCallback) {
	log := a.log.With().Str("bot", term.Bot).Str("msgid", ev.MsgID).Str("card_task_id", ev.Event.TaskID).Logger()
	js := a.js.Load()
	if a.cfg.Cards == nil || js == nil {
		log.Info().Msg("template_card_event not answered: no backend answers cards here, or JetStream not reachable yet")
		return
	}
	done := a.track(term)
	a.sem <- struct{}{} // events share the bound with messages
	a.wg.Go(func() {
		defer done()
		defer func() { <-a.sem }()
		ctx, cancel := context.WithTimeout(term.Context(), updateWindow)
		defer cancel()
		click, err := a.cardClick(ctx, js, term.Bot, ev)
		if err != nil {
			log.Warn().Err(err).Msg("template_card_event: no card of a task of this bot")
			return
		}
		bctx, bcancel := context.WithTimeout(ctx, updateWindow-time.Second)
		card, err := a.cfg.Cards.AnswerCard(bctx, click)
		bcancel()
		switch {
		case errors.Is(err, ErrClickQueued):
			a.clicked(ctx, js, term, c, reqID, ev, click)
			return
		case err != nil:
			log.Warn().Err(err).Str("task", click.TaskID).Msg("the backend did not answer the card's click")
			return
		case card == nil:
			return
		}
		a.updateCard(ctx, term, c, reqID, ev, click, card)
	})
}

// updateCard sends card in place of the clicked one, under the
// conversation's send budget.
func (a *Access) updateCard(ctx context.Context, term *election.Term, c *wecom.Conn, reqID string, ev *wecom.EventCallback, click CardClick, card json.RawMessage) {
	log := a.log.With().Str("bot", term.Bot).Str("msgid", ev.MsgID).Str("task", click.TaskID).Logger()
	card, err := withTaskID(card, ev.Event.TaskID)
	if err != nil {
		log.Warn().Err(err).Msg("the backend's card is not a JSON object: not sent")
		return
	}
	if a.cfg.Outbound != nil && !a.cfg.Outbound.Budget(term.Bot).Take(click.Chat, 0) {
		log.Warn().Msg("card update not sent: the conversation's send budget is spent")
		return
	}
	body := &wecom.UpdateBody{ResponseType: wecom.ResponseTypeUpdateTemplateCard, TemplateCard: card}
	if err := c.UpdateTemplateCard(ctx, reqID, body); err != nil {
		if a.cfg.Outbound != nil && wecom.ErrCodeOf(err) != -1 {
			a.cfg.Outbound.Budget(term.Bot).Refund(click.Chat)
		}
		log.Warn().Err(err).Msg("card update failed")
		return
	}
	log.Info().Str("event_key", click.EventKey).Msg("card updated")
}

// cardClick finds the task and card ev's task_id names.
func (a *Access) cardClick(ctx context.Context, js *bound, bot string, ev *wecom.EventCallback) (CardClick, error) {
	id, own := task.SplitCardTaskID(ev.Event.TaskID)
	if id == "" {
		return CardClick{}, errors.New("the event has no task_id")
	}
	r, err := js.lc.Get(ctx, id)
	if err != nil {
		return CardClick{}, err
	}
	if r.Bot != bot {
		return CardClick{}, fmt.Errorf("task %s is bot %s's", id, r.Bot)
	}
	out, err := task.ReadOutput(ctx, js.store, id, true) // the card came with the last write
	if err != nil {
		return CardClick{}, err
	}
	if out == nil || out.Reply == nil || len(out.Reply.Card) == 0 {
		return CardClick{}, fmt.Errorf("task %s's answer carried no card", id)
	}
	return CardClick{Bot: bot, TaskID: id, Chat: r.Chat, ChatType: r.ChatType, User: ev.From.UserID, CardTaskID: own,
		EventKey: ev.Event.EventKey, Selected: ev.Event.Selections(), Card: out.Reply.Card}, nil
}

// withTaskID is card with task_id set: WeCom updates the card whose
// task_id the update names.
func withTaskID(card json.RawMessage, taskID string) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(card, &obj); err != nil {
		return nil, err
	}
	raw, _ := json.Marshal(taskID)
	obj["task_id"] = raw
	return json.Marshal(obj)
}
