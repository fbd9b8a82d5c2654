package access

import (
	"context"
	"errors"

	"github.com/botctl/botctl/pkg/wecom"
)

// DefaultLimit is the reply to a message over a limit when Texts.Limit is
// empty.
const DefaultLimit = "抱歉，你的提问次数已达上限，请稍后再试。"

// limited checks the message against its bot's limits (Rules.Limits),
// after the checks that answer without a task and before the dispatch: a
// message over one is answered with the limit text, runs no task and is
// counted (Stats.Limited, Metrics.LimitRefused). It reports whether the
// message was handled here (refused, or a duplicate).
//
// The counts are in JetStream, shared by every node (package limits):
// while JetStream is away, or when the count cannot be read or written,
// the message is admitted (the limit protects a bill; refusing everyone
// through an outage would cost more). A duplicate callback is not counted
// twice: with limits set, the dedupe read is waited for first.
func (h *handling) limited() bool {
	l := h.rules.Limits
	if !l.Any() || h.js == nil {
		return false
	}
	if h.duplicate() {
		return true
	}
	lctx, cancel := context.WithTimeout(h.ctx, h.a.cfg.Timeout)
	over, err := h.js.limits.Admit(lctx, h.term.Bot, h.m.From.UserID, l)
	cancel()
	if err != nil {
		h.log.Warn().Err(err).Msg("limits not counted (JetStream): the message is admitted")
		return false
	}
	if over == "" {
		h.admitted = true
		return false
	}
	a := h.a
	a.count(func(s *Stats) { s.Limited++ })
	if a.cfg.Metrics != nil {
		a.cfg.Metrics.LimitRefused(h.term.Bot, over)
	}
	h.log.Info().Str("user", h.m.From.UserID).Str("limit", over).Msg("over a limit; refused, no task")
	text := h.rules.Texts.Limit
	if e := h.in.early; e != nil {
		// The receipt went before the limits were asked: its stream is
		// finished with the refusal, not left at "received".
		if rcpt := h.earlyReceipt(e); rcpt.err == nil || errors.Is(rcpt.err, wecom.ErrAckUnknown) {
			if rcpt.err == nil {
				h.spent()
			}
			h.spent()
			h.finishOn("s-"+h.id, text)
			h.markSeen()
			return true
		}
	}
	h.answered(text)
	return true
}

// unadmit takes an admitted message back out of the limits' counts: the
// dispatch refused it (the conversation busy) or failed, and no task runs.
func (h *handling) unadmit() {
	if !h.admitted {
		return
	}
	h.admitted = false
	uctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.a.cfg.Timeout)
	defer cancel()
	if err := h.js.limits.Release(uctx, h.term.Bot, h.m.From.UserID, h.rules.Limits); err != nil {
		h.log.Warn().Err(err).Msg("limits: a message that ran no task still counted")
	}
}
