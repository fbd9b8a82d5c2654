package access

import (
	"context"
	"time"

	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/wecom"
)

// handled records that the callback was handled to the end: past the
// inbound watermark, and known under the id WeCom's message history
// gives it (backfill.HistoryMsgID), which carries no msgid: a gap
// backfill that reads the history over this message (its overlap) finds
// it known and does not answer it twice. The mark is written after the
// message's record, off the receipt's path.
func (h *handling) handled() {
	h.markHistoryID()
	h.a.handled(h.term.Bot, h.created)
}

// markHistoryID marks the callback seen under its history id. Only text
// messages: the history gives no text of the others, and a gap backfill
// answers none of them.
func (h *handling) markHistoryID() {
	id := historyID(h.term.Bot, h.m)
	if h.js == nil || id == "" {
		return
	}
	// Its own wait, as the receipt's: what came before may have spent the
	// handling's.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.a.cfg.Timeout)
	defer cancel()
	if err := h.js.store.MarkSeen(ctx, h.term.Bot, id); err != nil {
		h.log.Debug().Err(err).Msg("message not marked seen under its history id yet; kept to be written once JetStream answers")
		h.a.keepMark(h.js, h.term.Bot, id, time.Time{})
	}
}

// historyID is the id WeCom's message history gives bot's callback m
// (backfill.HistoryMsgID); "" for a message the history gives no text of
// (not a text message, or no create_time).
func historyID(bot string, m *wecom.MsgCallback) string {
	if m.MsgType != wecom.MsgTypeText || m.Text == nil || m.CreateTime == 0 {
		return ""
	}
	chatType := wecom.ChatSingle
	if m.ChatType == wecom.ChatGroup {
		chatType = wecom.ChatGroup
	}
	return backfill.HistoryMsgID(bot, chatType, m.Conversation(), m.From.UserID, time.Unix(m.CreateTime, 0), wecom.MsgTypeText, m.Text.Content)
}

// remember records that this node read bot's callback m (Known): under
// its msgid and, for a text, its history id too, so that a gap backfill
// from WeCom's history on this node (a blip reconnects the same leader)
// does not answer it again while its handler has not yet marked it.
func (a *Access) remember(bot string, m *wecom.MsgCallback) {
	a.arrived.add(bot + "\x00" + m.MsgID)
	if id := historyID(bot, m); id != "" {
		a.arrived.add(bot + "\x00" + id)
	}
}

// markHistoryIDOf marks a missed message taken from a history source seen
// under the id WeCom's history gives it, when that is not its msgid: a
// later pass over another source (WeCom's history after the simulator's,
// or the reverse) finds it known. A refused write is kept and retried.
func (a *Access) markHistoryIDOf(ctx context.Context, js *bound, bot string, m backfill.Message) {
	id := m.HistoryID(bot)
	if id == "" || id == m.MsgID {
		return
	}
	if err := js.store.MarkSeen(ctx, bot, id); err != nil {
		a.log.Debug().Err(err).Str("msgid", m.MsgID).Msg("missed message not marked seen under its history id yet; kept to be written once JetStream answers")
		a.keepMark(js, bot, id, time.Time{})
	}
}
