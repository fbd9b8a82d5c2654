package health

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/backfill"
	"github.com/botctl/botctl/pkg/incident"
	"github.com/botctl/botctl/pkg/task"
)

// replayPoll is how often the compensation checks the answers it waits for.
const replayPoll = time.Second

// compensate runs once a connection is up: the term's gap backfill (every
// term: a message missed during a handover is found too), and, for
// incident id, the outbound replay: the complete answers owed when the bot
// came back are delivered (by this term's pusher; the task record is the
// proof, so each is sent once) or fail for good. Then the incident's data
// is complete. Progress of streams that were running during the outage was
// not sent and is not sent late: the user gets the current text, and the
// frames skipped are counted as stale.
func (h *Health) compensate(ctx context.Context, bd *binding, b *botState, term *election.Term, id string, recovered time.Time) {
	var held []string
	if id != "" {
		var stale int
		held, stale = h.owed(ctx, bd, b.id)
		h.updateIncidentID(ctx, bd, b.id, id, func(i *incident.Incident) {
			i.Replay.Held, i.Replay.DroppedStale = len(held), stale
			i.Note(h.now(), h.cfg.NodeID, "compensation: %d complete answer(s) owed by push, %d stream(s) whose progress while away is dropped as stale", len(held), stale)
		})
	}
	var rep backfill.Report
	var berr error
	ran := h.cfg.Backfill != nil
	if ran {
		rep, berr = h.cfg.Backfill(ctx, term)
	}
	if ctx.Err() != nil {
		return
	}
	if rep.NotFilled > 0 {
		h.incomplete(ctx, bd, b.id, rep, id)
	}
	if id == "" {
		return
	}
	note := ""
	switch {
	case !ran:
		note = "no history source (backfill.history_url): messages sent while the bot was away cannot be recovered"
	case berr != nil:
		note = "backfill failed: " + berr.Error()
	}
	h.updateIncidentID(ctx, bd, b.id, id, func(i *incident.Incident) {
		i.Backfill = incident.Backfill{Ran: ran && berr == nil, Scanned: rep.Read, Filled: rep.Filled, NotFilled: rep.NotFilled, Note: note}
		i.Note(h.now(), h.cfg.NodeID, "backfill: %d read, %d already handled, %d answered late, %d not filled", rep.Read, rep.Known, rep.Filled, rep.NotFilled)
	})

	replayed, failed, expired := 0, 0, 0
	for len(held) > 0 {
		left := held[:0]
		for _, tid := range held {
			r, err := bd.tasks.Get(ctx, tid)
			switch {
			case err != nil && ctx.Err() != nil:
				return
			case err != nil:
				left = append(left, tid) // unreadable now: ask again
			case r.Delivery == task.Delivered:
				replayed++
			case r.Delivery == task.DeliveryFailed && strings.HasPrefix(r.DeliveryReason, task.ExpiredPrefix):
				expired++
			case r.Delivery == task.DeliveryFailed:
				failed++
			default:
				left = append(left, tid)
			}
		}
		held = left
		if len(held) == 0 {
			break
		}
		t := time.NewTimer(replayPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return // the term ended: the next one replays what is left
		case <-t.C:
		}
	}
	now := h.now()
	h.updateIncidentID(ctx, bd, b.id, id, func(i *incident.Incident) {
		i.Replay.Replayed, i.Replay.Failed, i.Replay.Expired = replayed, failed, expired
		i.DataComplete = now
		i.Note(now, h.cfg.NodeID, "data complete: %d answer(s) replayed, %d failed for good, %d expired", replayed, failed, expired)
		h.maybeClose(i, now)
	})
	if ran && berr == nil && h.cfg.Overlap > 0 {
		h.trailingPass(ctx, bd, b, term, id, recovered)
	}
}

// trailingPass reads the history once more at recovered + Overlap, so the
// reconciled range is [watermark − overlap, recovered + overlap]: a message
// WeCom failed to deliver in the first moments of the new connection is
// found too. It does not hold up the incident's data-complete time (that
// is when the gap itself was reconciled), and what it finds is added to
// the incident's backfill counts.
func (h *Health) trailingPass(ctx context.Context, bd *binding, b *botState, term *election.Term, id string, recovered time.Time) {
	t := time.NewTimer(time.Until(recovered.Add(h.cfg.Overlap)))
	select {
	case <-ctx.Done():
		t.Stop()
		return
	case <-t.C:
	}
	rep, err := h.cfg.Backfill(ctx, term)
	if err != nil || ctx.Err() != nil {
		return
	}
	if rep.NotFilled > 0 {
		h.incomplete(ctx, bd, b.id, rep, id)
	}
	bd.incidents.Update(ctx, b.id, id, func(i *incident.Incident) error {
		i.Backfill.Filled += rep.Filled
		i.Backfill.NotFilled += rep.NotFilled
		i.Note(h.now(), h.cfg.NodeID, "trailing backfill at recovered + %s: %d answered late, %d not filled", h.cfg.Overlap, rep.Filled, rep.NotFilled)
		return nil
	})
}

// owed lists bot's tasks whose complete answer is waiting for delivery,
// and counts the streams still running (their progress while away is
// stale).
func (h *Health) owed(ctx context.Context, bd *binding, bot string) (held []string, stale int) {
	ids, err := bd.store.PendingTasks(ctx, bot)
	if err != nil {
		h.log.Warn().Err(err).Str("bot", bot).Msg("owed answers not counted")
		return nil, 0
	}
	for _, id := range ids {
		r, err := bd.tasks.Get(ctx, id)
		if err != nil {
			continue
		}
		switch {
		case r.Delivery.Finished():
		case r.Exec.Finished():
			held = append(held, id)
		case r.Delivery == task.Streaming:
			stale++
		}
	}
	return held, stale
}

// incomplete marks the conversations a backfill could not fill, and opens
// (or adds to) the bot's data incident: a person must know.
func (h *Health) incomplete(ctx context.Context, bd *binding, bot string, rep backfill.Report, outage string) {
	why := fmt.Sprintf("%d missed message(s) between %s and %s could not be answered", rep.NotFilled,
		rep.Since.UTC().Format(time.RFC3339), rep.Until.UTC().Format(time.RFC3339))
	if h.cfg.MarkIncomplete != nil {
		if err := h.cfg.MarkIncomplete(ctx, bot, rep.Unfilled, why); err != nil {
			h.log.Error().Err(err).Str("bot", bot).Msg("conversations not marked incomplete")
		}
	}
	now := h.now()
	inc := h.open(ctx, bd, incident.Incident{Bot: bot, Kind: incident.Data, Level: incident.Human, Signal: incident.SignalBackfill,
		Reason: "backfill incomplete: " + why, Dropped: now, Detected: now})
	if inc == nil {
		return
	}
	h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
		for _, c := range rep.Unfilled {
			if len(i.Incomplete) < 256 && !slices.Contains(i.Incomplete, c) {
				i.Incomplete = append(i.Incomplete, c)
			}
		}
		if outage != "" {
			i.Note(now, h.cfg.NodeID, "after outage %s: %s", outage, why)
		}
	})
	if outage != "" {
		h.updateIncidentID(ctx, bd, bot, outage, func(i *incident.Incident) {
			i.Incomplete = append(i.Incomplete[:0:0], rep.Unfilled...)
		})
	}
}

// DeliveryFailed opens (or adds to) bot's data incident for an answer that
// could not be delivered, for good: the pusher's FailedForGood.
func (h *Health) DeliveryFailed(r *task.Record, err error) {
	b := h.bot(r.Bot)
	now := h.now()
	h.post(b, func(ctx context.Context) {
		bd := h.binding()
		if bd == nil {
			return
		}
		inc := h.open(ctx, bd, incident.Incident{Bot: r.Bot, Kind: incident.Data, Level: incident.Human, Signal: incident.SignalDelivery,
			Reason: fmt.Sprintf("the answer to task %s (conversation %s) could not be delivered: %v", r.ID, r.Chat, err), Dropped: now, Detected: now})
		if inc == nil {
			return
		}
		h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
			i.Note(now, h.cfg.NodeID, "delivery failed for good: task %s, conversation %s: %v", r.ID, r.Chat, err)
		})
	})
}
