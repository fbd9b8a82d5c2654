package access

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Known reports whether bot's message msgid was handled or is being
// handled: this node read it (its handler may still wait on JetStream),
// it has a task record, or was answered without one. The gap backfill
// skips it, and the health monitor does not count it as missed (a
// leader cut off from NATS still hears WeCom: its callbacks are not a
// deaf connection).
func (a *Access) Known(ctx context.Context, bot, msgid string) (bool, error) {
	if a.arrived.has(bot + "\x00" + msgid) {
		return true, nil
	}
	js := a.js.Load()
	if js == nil {
		return false, errors.New("access: JetStream not bound")
	}
	if _, err := js.store.Tasks().Get(ctx, task.ID(bot, msgid)); err == nil {
		return true, nil
	} else if !errors.Is(err, natsjs.ErrKeyNotFound) {
		return false, err
	}
	return js.store.Seen(ctx, bot, msgid)
}

// Late takes a message the bot missed (found by the gap backfill) as a
// task whose answer is pushed with a note that it is late: there is no
// callback to reply to. Commands, refusals and invalid messages are
// skipped (remembered as handled): a late "/help" helps nobody. A busy
// conversation returns backfill.ErrBusy: the message is deferred, and a
// later pass hands it over once the conversation is free (the caller's
// passes are bounded; what is still deferred after the last is not
// filled).
func (a *Access) Late(ctx context.Context, bot string, m backfill.Message) error {
	js := a.js.Load()
	if js == nil {
		return errors.New("access: JetStream not bound")
	}
	question := strings.TrimSpace(m.Text)
	chat := m.Chat
	if chat == "" {
		chat = m.UserID
	}
	switch {
	case m.MsgID == "" || m.UserID == "":
		return fmt.Errorf("history message without msgid or user")
	case !a.rules(bot).allowed(m.UserID, chat, m.ChatType), a.rules(bot).unfit(question) != "", strings.HasPrefix(question, "/"):
		a.markSeen(ctx, js, bot, m.MsgID, m.Created)
		a.markHistoryIDOf(ctx, js, bot, m)
		return nil
	}
	// In the dedupe memory while it is taken: its callback, if it comes
	// after all, is a duplicate (a fresh callback skips the task bucket's
	// read), and forgotten again if it is not taken.
	key := bot + "\x00" + m.MsgID
	if !a.seen.add(key) {
		return nil // its callback is being handled
	}
	taken := false
	defer func() {
		if !taken {
			a.seen.remove(key)
		}
	}()
	rec := task.New(bot, m.MsgID, a.cfg.Now().UTC())
	rec.Chat, rec.ChatType, rec.User, rec.Question, rec.Late = chat, m.ChatType, m.UserID, question, true
	out, err := a.cfg.Dispatch.DispatchUnless(ctx, task.MessageOf(rec), nil) // the backfill asked Known first
	switch {
	case err != nil:
		return err
	case out.Busy:
		return fmt.Errorf("%w: conversation %s has a task; missed message %s waits for it", backfill.ErrBusy, chat, m.MsgID)
	case out.Duplicate:
		taken = true
		return nil
	}
	taken = true // queued: a callback now is a duplicate, whatever the record
	a.markHistoryIDOf(ctx, js, bot, m)
	rec.Tier = string(out.Tier)
	if _, err := js.lc.Open(ctx, rec); err != nil {
		return err
	}
	a.count(func(s *Stats) { s.Backfilled++ })
	if a.cfg.Outbound != nil {
		a.cfg.Outbound.Dispatched(bot, rec.ID, chat)
	}
	return nil
}
