package access

// A click on a card whose backend does not answer it at once
// (ErrClickQueued) is a task of its own, queued as a message is: its
// msgid the click event's, so a click WeCom sends again finds the same
// task and the queue's dedupe refuses a second publish; its subject the
// conversation's, the conversation's mutex; its record naming the card's
// owner task and the choice (task.Click). Any node's worker asks the
// backend, and the answer is pushed (aibot_send_msg) as any answer
// without a stream is: a click's req_id takes only a card update.
//
// The card is updated by the leader at once, within WeCom's 5 s, by
// botctl, not by the agent: the clicked card, unchanged but for its
// subtitle, which says the choice was taken. The agent's answer, a card
// of its own too if it sends one, follows as a push.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// ErrClickQueued is what Cards.AnswerCard returns when the bot's backend
// answers clicks as tasks (the next turn of its conversation), not with
// a card at once.
var ErrClickQueued = errors.New("access: the click is answered as a task")

// Notes on the clicked card: the choice taken, or not taken because the
// conversation has a task.
const (
	clickTakenNote = "已选择：%s"
	clickBusyNote  = "正在处理上一条消息，请稍后再点选"
)

// clickOutcome is what became of a click handed to the queue.
type clickOutcome int

const (
	clickTaken     clickOutcome = iota // a task now answers it
	clickDuplicate                     // a task answers it already: WeCom sent it again
	clickBusy                          // the conversation has a task: not taken
)

// queueClick makes click a task, once per event msgid.
func (a *Access) queueClick(ctx context.Context, js *bound, ev *wecom.EventCallback, click CardClick) (clickOutcome, error) {
	bot := click.Bot
	key := bot + "\x00" + ev.MsgID
	if !a.seen.add(key) {
		return clickDuplicate, nil // being handled here, or handled
	}
	taken := false
	defer func() {
		if !taken {
			a.seen.remove(key)
		}
	}()
	id := task.ID(bot, ev.MsgID)
	if _, err := js.store.Tasks().Get(ctx, id); err == nil {
		taken = true
		return clickDuplicate, nil
	} else if !errors.Is(err, natsjs.ErrKeyNotFound) {
		return 0, err
	}
	rec := task.New(bot, ev.MsgID, a.cfg.Now().UTC())
	rec.Chat, rec.ChatType, rec.User = click.Chat, click.ChatType, click.User
	rec.Question = choiceText(click.Card, click.EventKey, click.Selected)
	rec.Click = &task.Click{Owner: click.TaskID, CardTaskID: ev.Event.TaskID, EventKey: click.EventKey, Selected: click.Selected}
	out, err := a.cfg.Dispatch.DispatchUnless(ctx, task.MessageOf(rec), nil) // the task bucket was read above
	switch {
	case err != nil:
		return 0, err
	case out.Busy:
		return clickBusy, nil
	case out.Duplicate:
		taken = true
		return clickDuplicate, nil
	}
	taken = true
	rec.Tier = string(out.Tier)
	if _, err := js.lc.Open(ctx, rec); err != nil {
		return 0, fmt.Errorf("record click task %s: %w", rec.ID, err)
	}
	if a.cfg.Outbound != nil {
		a.cfg.Outbound.Dispatched(bot, rec.ID, rec.Chat)
	}
	return clickTaken, nil
}

// clicked queues click and updates the card to say what became of it.
func (a *Access) clicked(ctx context.Context, js *bound, term *election.Term, c *wecom.Conn, reqID string, ev *wecom.EventCallback, click CardClick) {
	log := a.log.With().Str("bot", term.Bot).Str("msgid", ev.MsgID).Str("task", click.TaskID).Logger()
	outcome, err := a.queueClick(ctx, js, ev, click)
	if err != nil {
		log.Warn().Err(err).Msg("card click not taken: the task could not be queued")
		return
	}
	note := fmt.Sprintf(clickTakenNote, choiceText(click.Card, click.EventKey, click.Selected))
	if outcome == clickBusy {
		note = clickBusyNote
	}
	card, err := withSubtitle(click.Card, note)
	if err != nil {
		log.Warn().Err(err).Msg("the clicked card is not a JSON object: not updated")
		return
	}
	a.updateCard(ctx, term, c, reqID, ev, click, card)
	log.Info().Int("outcome", int(outcome)).Str("event_key", click.EventKey).Msg("card click queued")
}

// choiceText is the choice in words: the text of the card's button
// whose key is key, else key itself; on a card with choices, the texts
// of the options chosen (each question's joined by "、", the questions
// by "；"), then the button in brackets: "Big room（Submit）".
func choiceText(card json.RawMessage, key string, selected []wecom.Selection) string {
	var c choiceCard
	_ = json.Unmarshal(card, &c) // a card that is not an object names nothing: the keys stand in
	button := key
	for _, b := range append(c.Buttons, c.Submit) {
		if b.Key == key && b.Text != "" {
			button = b.Text
			break
		}
	}
	if len(selected) == 0 {
		return button
	}
	questions := make([]string, 0, len(selected))
	for _, q := range selected {
		texts := make([]string, 0, len(q.OptionIDs))
		for _, id := range q.OptionIDs {
			texts = append(texts, c.optionText(q.QuestionKey, id))
		}
		questions = append(questions, strings.Join(texts, "、"))
	}
	words := strings.Join(questions, "；")
	if button != "" {
		words += "（" + button + "）"
	}
	return words
}

// choiceCard is what choiceText reads of a template card: its buttons
// and its questions (a vote's checkbox, a multiple_interaction's
// select_list, a button_selection), each with its options.
type choiceCard struct {
	Buttons         []cardButton    `json:"button_list"`
	Submit          cardButton      `json:"submit_button"`
	Checkbox        *cardQuestion   `json:"checkbox"`
	Selects         []*cardQuestion `json:"select_list"`
	ButtonSelection *cardQuestion   `json:"button_selection"`
}

type cardButton struct {
	Text string `json:"text"`
	Key  string `json:"key"`
}

type cardQuestion struct {
	QuestionKey string `json:"question_key"`
	Options     []struct {
		ID   string `json:"id"`
		Text string `json:"text"`
	} `json:"option_list"`
}

// optionText is the text of option id of the card's question qkey, else
// id itself.
func (c choiceCard) optionText(qkey, id string) string {
	for _, q := range append([]*cardQuestion{c.Checkbox, c.ButtonSelection}, c.Selects...) {
		if q == nil || q.QuestionKey != qkey {
			continue
		}
		for _, o := range q.Options {
			if o.ID == id && o.Text != "" {
				return o.Text
			}
		}
	}
	return id
}

// withSubtitle is card with its sub_title_text set to note.
func withSubtitle(card json.RawMessage, note string) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(card, &obj); err != nil {
		return nil, err
	}
	raw, _ := json.Marshal(note)
	obj["sub_title_text"] = raw
	return json.Marshal(obj)
}
