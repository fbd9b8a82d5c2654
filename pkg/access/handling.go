package access

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/dispatch"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
)

// handling is one message callback's handling after arrive, in the
// package doc's order: the checks that answer without a task, then the
// dispatch (the conversation's mutex), the receipt and the record. Its
// methods are the ways it can answer.
type handling struct {
	a      *Access
	ctx    context.Context
	cancel context.CancelFunc // of a renewed ctx (renew), if any
	term   *election.Term
	c      *wecom.Conn
	reqID  string
	m      *wecom.MsgCallback
	in     arrival
	log    zerolog.Logger
	rules  *Rules // the bot's, as the message arrived

	now     time.Time // the callback read (the task's received time)
	created time.Time // WeCom's create_time (now if it has none): the inbound watermark's
	id      string    // the task's ID
	chat    string
	js      *bound // nil while JetStream is away
	// dedupe is the task bucket's read of the task (the callback is a
	// duplicate if it exists), running beside what follows; nil: a fresh
	// callback, nothing to find.
	dedupe *dedupeRead
	// admitted: the message was counted in its bot's limits (limits.go).
	admitted bool
	// admittedBytes: the bytes of the message's files counted in its
	// bot's byte limits (media.go), given back when it runs no task.
	admittedBytes int64
	// slot is the message's handling slot.
	slot *heldSlot
	// receiving: the task was recorded before its files were taken
	// (receiving.go); dispatched: then dispatched (or found queued);
	// owed: a refusal the connection could not carry, owed by the pusher.
	receiving, dispatched bool
	owed                  string
}

// recorded reports whether the task bucket has the task: the callback is
// a duplicate. It waits for the read.
func (h *handling) recorded() bool { return h.dedupe.recorded() }

// sent is a receipt's outcome.
type sent struct {
	at  time.Time // WeCom's ack read
	err error
}

// handle handles callback m, read off connection c, after arrive.
func (a *Access) handle(ctx context.Context, term *election.Term, c *wecom.Conn, reqID string, m *wecom.MsgCallback, in arrival, slot *heldSlot) {
	h := &handling{a: a, ctx: ctx, term: term, c: c, reqID: reqID, m: m, in: in, slot: slot,
		log: a.log.With().Str("bot", term.Bot).Str("msgid", m.MsgID).Str("req_id", reqID).Logger(),
		now: in.read.UTC(), rules: a.rules(term.Bot)}
	defer h.settleReceiving()
	defer func() {
		// Every way out gives back the req_id's turn; the receipt's
		// outcome is read where it matters (after the dispatch). The
		// receipt may be early, or written before a download.
		if e := h.in.early; e != nil && e.p != nil {
			e.p.Wait(ctx)
		}
		if h.cancel != nil {
			h.cancel()
		}
	}()
	// Parse and validate what everything after depends on.
	if !in.valid {
		a.count(func(s *Stats) { s.Invalid++ })
		h.log.Warn().Msg("callback without msgid, user or req_id; dropped")
		return
	}
	// Dedupe: memory first (arrive), then the task bucket (which survives
	// failover).
	if !in.first {
		a.count(func(s *Stats) { s.Duplicates++ })
		h.log.Debug().Msg("duplicate callback (seen)")
		return
	}
	h.id, h.chat, h.js = task.ID(term.Bot, m.MsgID), m.Conversation(), a.js.Load()
	if h.js == nil {
		h.log.Debug().Msg("JetStream not reachable yet: deduplicated in memory only")
	}
	h.created = time.Unix(m.CreateTime, 0)
	if m.CreateTime == 0 {
		h.created = h.now
	}
	// The task bucket's answer runs beside what follows: every reply
	// waits for it, and the dispatch asks it before any tier but the
	// queue. One JetStream round trip on the receipt's path, not two.
	if !in.fresh { // fresh: nothing to find
		h.dedupe = readDedupe(ctx, h.js, term.Bot, m.MsgID, reqID, term.Rev, func(d time.Duration) { h.stage("dedupe", d) })
	}
	if question, ok := h.checked(); ok && !h.limited() {
		if atts, ok := h.attachments(question); ok {
			h.task(question, atts)
		}
	}
}

// stage reports how long a step on the receipt's path took (Config.Stage).
func (h *handling) stage(name string, d time.Duration) {
	if h.a.cfg.Metrics != nil {
		h.a.cfg.Metrics.Stage(h.term.Bot, name, d)
	}
}

// duplicate reports (and counts) a callback whose task the bucket has.
func (h *handling) duplicate() bool {
	if !h.recorded() {
		return false
	}
	h.a.count(func(s *Stats) { s.Duplicates++ })
	h.log.Debug().Msg("duplicate callback (task exists)")
	return true
}

// spent counts a send in the conversation's budget.
func (h *handling) spent() {
	if h.a.cfg.Outbound != nil {
		h.a.cfg.Outbound.Budget(h.term.Bot).Record(h.chat)
	}
}

// finishOn sends text as the last frame of stream streamID: "r-"+id for a
// reply without a task, the task's own stream for an early receipt's
// refusal. A send WeCom refused is refunded to the budget.
func (h *handling) finishOn(streamID, text string) error {
	// Its own wait, as the receipt's: what came before (JetStream
	// retries) may have spent the handling's.
	sctx, scancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.a.cfg.Timeout)
	defer scancel()
	err := h.c.ReplyStream(sctx, h.reqID, wecom.Stream{ID: streamID, Content: text, Finish: true})
	if err != nil {
		var refused *wecom.AckError
		if h.a.cfg.Outbound != nil && errors.As(err, &refused) && !errors.Is(err, wecom.ErrAckUnknown) {
			if refused.ErrCode == wecom.ErrCodeRateLimited {
				// WeCom counted more than the budget: lower it, not refund.
				h.a.cfg.Outbound.Budget(h.term.Bot).Refused(h.chat)
			} else {
				h.a.cfg.Outbound.Budget(h.term.Bot).Refund(h.chat)
			}
		}
		h.log.Warn().Err(err).Msg("reply failed")
	}
	return err
}

func (h *handling) send(text string) error { return h.finishOn("r-"+h.id, text) }

// reply answers without a task, and reports whether it was sent (or at
// least written on a connection that stays). When the conversation's budget
// runs low the reply is not sent: it would spend the quota the running
// task's final frame needs (a user who sends many messages at once gets
// the answer first, not a wall of "please wait"). A reply the connection
// could not carry (it closed: a graceful stop, a kick, the network), or
// that WeCom refused as over its quota, is not sent either, and the
// caller owes it another way: this connection's req_id dies with it.
func (h *handling) reply(text string) bool {
	if h.a.cfg.Outbound != nil && !h.a.cfg.Outbound.Budget(h.term.Bot).Take(h.chat, ReplyReserve) {
		h.a.count(func(s *Stats) { s.Suppressed++ })
		h.log.Info().Str("chat", h.chat).Msg("reply held back: the conversation's send budget is reserved for its answer")
		return false
	}
	err := h.send(text)
	// A frame refused as over WeCom's quota (45009) was not shown: owed,
	// like one the budget held back.
	var refused *wecom.AckError
	if errors.As(err, &refused) && refused.ErrCode == wecom.ErrCodeRateLimited && !errors.Is(err, wecom.ErrAckUnknown) {
		return false
	}
	// An ack lost (ErrAckUnknown: timed out, or owed to an earlier frame)
	// leaves a frame written that WeCom most likely showed: tried, so as
	// not to show it twice. A closed connection or a connection errcode
	// leaves it unsent, or unknown at the close: owed.
	return !wecom.IsConnectionError(err) || errors.Is(err, wecom.ErrAckUnknown)
}

// replyAnyway sends text whatever the budget says (counted in it): an
// answer nothing will send later. Over botctl's own budget is not over
// WeCom's quota, which the budget keeps a margin under; a message that
// gets no reply at all is worse than a tighter margin.
func (h *handling) replyAnyway(text string) {
	h.spent()
	h.send(text)
}

// answered replies to a message that needs no task, and remembers it was
// handled (the gap backfill must not answer it again). A reply the
// connection could not carry is not owed later, unlike busy's: a late
// "/help" or refusal helps nobody (Late skips them the same way).
func (h *handling) answered(text string) {
	if h.duplicate() {
		return
	}
	h.reply(text)
	h.markSeen()
}

func (h *handling) markSeen() {
	h.markHistoryID()
	// Its own wait, as the receipt's: what came before may have spent the
	// handling's.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.a.cfg.Timeout)
	defer cancel()
	h.a.markSeen(ctx, h.js, h.term.Bot, h.m.MsgID, h.created)
}

// announce tells the pusher of the task (Config.Dispatched).
func (h *handling) announce() {
	if h.a.cfg.Outbound != nil {
		h.a.cfg.Outbound.Dispatched(h.term.Bot, h.id, h.chat)
	}
}

// checked answers what needs no task (the allowlist's refusal, unfit
// content, commands) and otherwise returns the question, ok.
func (h *handling) checked() (question string, ok bool) {
	a, m := h.a, h.m
	verdict, question := h.rules.screen(m)
	switch verdict {
	case screenRefused:
		a.count(func(s *Stats) { s.Refused++ })
		h.log.Info().Str("user", m.From.UserID).Str("chat", h.chat).Msg("not on the allowlist; refused")
		h.answered(h.rules.Texts.Refused)
		return "", false
	case screenUnsupported:
		a.count(func(s *Stats) { s.Invalid++ })
		h.log.Info().Str("msgtype", clipType(m.MsgType)).Msg("unsupported message type")
		h.answered(unsupported(h.rules.Texts.Unsupported, clipType(m.MsgType)))
		return "", false
	case screenUnfit:
		a.count(func(s *Stats) { s.Invalid++ })
		h.answered(h.rules.unfit(question))
		return "", false
	case screenCommand:
		a.count(func(s *Stats) { s.Commands++ })
		if h.js == nil {
			h.reply(h.rules.Texts.Unavailable)
			return "", false
		}
		if h.duplicate() { // before the command runs, not only before its reply
			return "", false
		}
		h.answered(a.command(h.ctx, h.js, h.rules, h.term.Bot, h.chat, question))
		return "", false
	}
	return question, true
}

// receipt sends the receipt, the stream's first frame, which the pusher
// continues. Its wait is its own (up to Timeout), not what the dispatch
// left: a receipt WeCom applied whose ack botctl stopped waiting for
// leaves the user's stream open at "received" for good, beside the
// pushed answer.
func (h *handling) receipt(streamID string) sent {
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.a.cfg.Timeout)
	defer rcancel()
	t1 := time.Now()
	err := h.c.ReplyStream(rctx, h.reqID, wecom.Stream{ID: streamID, Content: h.rules.Texts.Receipt, Feedback: feedbackOf(h.id)})
	h.stage("receipt_frame", time.Since(t1))
	return sent{at: h.a.cfg.Now().UTC(), err: err}
}

// earlyReceipt waits for the early receipt's ack (arrive wrote it).
func (h *handling) earlyReceipt(e *earlyReceipt) sent {
	rcpt := sent{err: e.err, at: h.a.cfg.Now().UTC()}
	if e.p == nil {
		return rcpt
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.a.cfg.Timeout)
	_, rcpt.err = e.p.Wait(rctx)
	rcancel()
	if acked := e.p.Acked(); !acked.IsZero() {
		// The ack came while the dispatch ran: its own time.
		rcpt.at = h.a.cfg.Now().UTC().Add(-time.Since(acked))
		h.stage("receipt_frame", acked.Sub(e.sent))
	}
	return rcpt
}

// task dispatches the question as a task: the dispatch is the
// conversation's mutex (tier 1 refuses a second task for the
// conversation, and that refusal is an answer), then the receipt (unless
// it went early) and the record.
func (h *handling) task(question string, atts []task.Attachment) {
	a := h.a
	h.inOrder()
	rec := h.record(question, atts)
	if a.cfg.Marks != nil && a.cfg.Marks.Marked(h.term.Bot, h.chat) {
		// Taking the mark tells the user once: never for a duplicate.
		if h.duplicate() {
			return
		}
		if why, ok := a.cfg.Marks.TakeIncomplete(h.ctx, h.term.Bot, h.chat); ok {
			rec.Incomplete = why
		}
	}
	t0 := time.Now()
	out, err := a.cfg.Dispatch.DispatchUnless(h.ctx, task.MessageOf(rec), h.recorded)
	h.stage("dispatch", time.Since(t0))
	// Dispatched (or not): the conversation's later messages go on.
	a.gates.leave(h.term.Bot+"\x00"+h.chat, h.in.gate)
	if err != nil || out.Busy {
		h.unadmit() // no task: the message is not counted in the limits
	} else {
		h.dispatched = true
	}
	// Early: written already (arrive), when nothing suggested a refusal.
	var rcpt sent
	opened := false // the user's stream shows the receipt (or may)
	if h.in.early != nil {
		rcpt = h.earlyReceipt(h.in.early)
		opened = rcpt.err == nil || errors.Is(rcpt.err, wecom.ErrAckUnknown)
	}
	if opened && (err != nil || out.Busy) {
		h.dropFiles(atts)
		h.earlyMissed(rec, rcpt, err)
		return
	}
	if h.duplicate() {
		if err == nil && out.Tier == dispatch.TierQueue && !out.Duplicate {
			// Its msgid was past the queue's duplicate window: the worker
			// that pulls it finds the task finished and removes it.
			h.log.Info().Msg("duplicate callback queued again; its worker skips it")
		}
		return
	}
	switch {
	case err != nil:
		h.dropFiles(atts)
		a.count(func(s *Stats) { s.Failed++ })
		h.log.Error().Err(err).Msg("dispatch failed")
		// Nothing else will answer it: not held back by the budget.
		h.replyAnyway(dispatchFailed)
		return
	case out.Busy:
		h.dropFiles(atts)
		h.busy(rec)
		return
	case out.Duplicate:
		a.count(func(s *Stats) { s.Duplicates++ })
		if opened {
			h.log.Warn().Msg("early receipt for a callback the queue already had (create_time later than its first delivery: clocks apart by more than the margin?)")
		}
		h.log.Debug().Msg("duplicate callback (the queue had its msgid)")
		h.handled()
		return
	}
	a.count(func(s *Stats) { s.Dispatched++ })
	rec.Tier = string(out.Tier)

	if h.in.early == nil {
		rcpt = h.receipt(rec.StreamID)
	}
	if rcpt.err == nil {
		h.spent()
		if a.cfg.Metrics != nil {
			a.cfg.Metrics.Receipted(h.term.Bot, rcpt.at.Sub(h.now))
		}
		rec.SetDelivery(task.Streaming, "receipt sent", a.cfg.NodeID, rcpt.at)
		rec.PushedHash, rec.PushedAt = task.Hash(h.rules.Texts.Receipt), rcpt.at
		rec.StreamStart = rec.PushedAt
		rec.Sent(rec.PushedAt)
	} else {
		h.log.Warn().Err(rcpt.err).Msg("receipt failed; the answer will be pushed")
	}
	// The record with the raw context (a worker may have opened it from
	// the queue message already: the leader's fields are merged in).
	// The record gets its own time too: it carries the receipt (without
	// it the pusher cannot continue the stream).
	octx, ocancel := context.WithTimeout(context.WithoutCancel(h.ctx), a.cfg.Timeout)
	defer ocancel()
	if h.js == nil {
		h.log.Info().Str("task", h.id).Msg("JetStream not reachable yet: the task record is written by the worker that runs it")
	} else if _, err := h.js.lc.Open(octx, rec); err != nil {
		h.log.Error().Err(err).Msg("task record not written; the worker opens it from the queue message")
	} else if !out.Spooled {
		h.handled() // recorded in JetStream: past the inbound watermark
	}
	h.announce()
	h.log.Debug().Str("task", h.id).Str("tier", rec.Tier).Msg("task dispatched")
}

// record is the task record of h's message asking question, with files
// atts.
func (h *handling) record(question string, atts []task.Attachment) *task.Record {
	m := h.m
	rec := task.New(h.term.Bot, m.MsgID, h.now)
	rec.ReqID, rec.TermRev, rec.Chat, rec.ChatType, rec.User = h.reqID, h.term.Rev, h.chat, m.ChatType, m.From.UserID
	rec.Question, rec.StreamID, rec.Attachments = question, "s-"+h.id, atts
	return rec
}

// earlyMissed: the prediction missed (the dispatch found the
// conversation busy, or failed) after the receipt went early. The stream
// the user sees is finished with the refusal, whatever the budget (the
// receipt is spent), so it is not left at "received".
func (h *handling) earlyMissed(rec *task.Record, rcpt sent, err error) {
	a := h.a
	a.count(func(s *Stats) { s.EarlyMissed++ })
	text := h.rules.Texts.Busy
	if err != nil {
		a.count(func(s *Stats) { s.Failed++ })
		h.log.Error().Err(err).Msg("dispatch failed after an early receipt")
		text = dispatchFailed
	} else {
		a.count(func(s *Stats) { s.Busy++ })
		h.log.Info().Msg("early receipt, but the conversation was busy: its stream finished with the busy reply")
	}
	if rcpt.err == nil {
		h.spent() // the receipt
	}
	h.spent() // the refusal (refunded if WeCom refuses it)
	if ferr := h.finishOn(rec.StreamID, text); ferr != nil && err == nil {
		// Recorded as refused, the pusher sends it as the final frame
		// of this stream.
		if rerr := a.refuseLater(h.ctx, h.js, rec); rerr == nil {
			h.handled()
			h.announce()
			return
		}
	}
	if err == nil {
		h.markSeen()
	}
}

// busy answers a message whose conversation has a task: the refusal.
func (h *handling) busy(rec *task.Record) {
	a := h.a
	a.count(func(s *Stats) { s.Busy++ })
	if h.reply(h.rules.Texts.Busy) {
		h.markSeen()
		return
	}
	// The refusal is an answer, owed although the budget is spent:
	// recorded as a task refused busy, the pusher replies to it once,
	// paced under the quota like any final frame.
	if err := a.refuseLater(h.ctx, h.js, rec); err != nil {
		// Not recorded (JetStream down or electing a stream leader for
		// longer than the patience): nothing would ever send it, so it
		// goes now, over the budget, rather than the user seeing
		// nothing at all.
		h.log.Warn().Err(err).Msg("busy refusal held back but not recorded; sent now, over the send budget")
		h.replyAnyway(h.rules.Texts.Busy)
		h.markSeen()
		return
	}
	h.handled()
	h.announce() // the pusher steps it now, not at its next resync
}

// unsupported is the reply to a message of type kind: text with its %s,
// if it has one, filled in.
func unsupported(text, kind string) string {
	if strings.Contains(text, "%s") {
		return fmt.Sprintf(text, kind)
	}
	return text
}
