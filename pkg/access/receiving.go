package access

import (
	"context"

	"github.com/botctl/botctl/pkg/task"
)

// A message with files is recorded before they are downloaded
// (task.Lifecycle.Receive: queued, not dispatched, to be received by its
// arrival plus Media.MessageTimeout), so that a leader that dies mid-download
// leaves its trace: the sweep of the next leader gives the task up once
// that time and task.ReceivingGrace have passed, and its pusher tells the
// user. The handling settles the record on every way out
// (settleReceiving): dispatched, it is a task like any other; answered
// at receipt (files refused, conversation busy, dispatch failed), it is
// removed, as no task ran; a refusal the connection could not carry is
// recorded as failed, for the pusher to tell.

// receive records h's task before its files are downloaded. Best effort:
// when JetStream does not take the record, the download goes on as
// before (nothing marks the message if this leader then dies).
func (h *handling) receive(question string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.a.cfg.Timeout)
	defer cancel()
	until := h.in.read.Add(h.a.cfg.Media.MessageTimeout())
	if _, err := h.js.lc.Receive(ctx, h.record(question, nil), until); err != nil {
		h.log.Warn().Err(err).Msg("message with files not recorded before its download: a stop mid-download would lose it")
		return
	}
	h.receiving = true
}

// settleReceiving ends the record receive wrote when the handling took
// no task (see above). A task dispatched is left to its run.
func (h *handling) settleReceiving() {
	if !h.receiving || h.dispatched {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.a.cfg.Timeout)
	defer cancel()
	if h.owed != "" {
		// Failed, its delivery owed: the pusher tells the user (a
		// refusal, as a busy one refused late is).
		rec := h.record("", nil)
		if _, err := h.js.lc.RefusedSaying(ctx, task.MessageOf(rec), h.owed); err != nil {
			h.log.Warn().Err(err).Msg("files not taken and the refusal neither sent nor recorded: the sweep tells the user")
			return
		}
		h.a.handled(h.term.Bot, h.created)
		h.announce()
		return
	}
	if _, err := h.js.lc.Unreceived(ctx, h.id); err != nil {
		h.log.Warn().Err(err).Msg("record of a message answered at receipt not removed: the sweep tells its user again")
	}
}
