package health

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// lostEvents states the user events of the gap [dropped, recovered] (of
// route only, if not ""): WeCom does not send an event again, and no
// history source carries events (the simulator's history and WeCom's
// get_message hold messages only), so a card click (template_card_event),
// a feedback verdict (feedback_event) or an enter_chat sent then is lost,
// and how many were is unknown to botctl. "" for no gap.
func lostEvents(dropped, recovered time.Time, route string) string {
	if dropped.IsZero() || !recovered.After(dropped) {
		return ""
	}
	where := "to the bot"
	if route != "" {
		where = "in " + route
	}
	return fmt.Sprintf("user events sent %s between %s and %s (card clicks: template_card_event; feedback: feedback_event; enter_chat) are lost: "+
		"WeCom does not send an event again and no history source carries events, so how many were sent is unknown; "+
		"a user whose card click got no answer must click again",
		where, dropped.UTC().Format(time.RFC3339), recovered.UTC().Format(time.RFC3339))
}

// replayPoll is how often the compensation checks the answers it waits for.
const replayPoll = time.Second

// compensate runs once a connection is up: the term's gap backfill (every
// term: a message missed during a handover is found too), and, for
// incident id, the outbound replay: the complete answers owed when the bot
// came back are delivered (by this term's pusher; the task record is the
// proof, so each is sent once) or fail for good. Then the incident's data
// is complete. Progress of streams that were running during the outage was
// not sent and is not sent late: the user gets the current text. The
// streams are counted as stale (Replay.DroppedStale), and so are the
// status lines they were owed while away (Replay.DroppedStatusLines).
func (h *Health) compensate(ctx context.Context, bd *binding, b *botState, term *election.Term, id string, recovered time.Time) {
	var held, pending []string
	var dropped time.Time
	if id != "" {
		o := h.owed(ctx, bd, b.id, recovered)
		held, pending = o.held, o.chats
		if cur := h.updateIncidentID(ctx, bd, b.id, id, func(i *incident.Incident) {
			lines := o.statusLines(i.Dropped, h.cfg.StatusLineEvery)
			i.Replay.Held, i.Replay.DroppedStale, i.Replay.DroppedStatusLines = len(held), o.stale, lines
			i.Note(h.now(), h.cfg.NodeID, "compensation: %d complete answer(s) owed by push, %d stream(s) whose progress while away is dropped as stale, %d status line(s) due while away not sent",
				len(held), o.stale, lines)
		}); cur != nil {
			dropped = cur.Dropped
		}
	}
	var rep backfill.Report
	var berr error
	ran := h.cfg.Backfill != nil
	if ran {
		rep, berr = h.cfg.Backfill.Pass(ctx, term)
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
	// Without a history source nothing ran: serve's Backfill says so
	// with ErrNoHistory, a Health without one has none at all.
	noHistory := !ran || errors.Is(berr, ErrNoHistory)
	note := ""
	switch {
	case noHistory:
		note = noHistoryWhy(berr) + ": messages sent while the bot was away cannot be recovered"
	case berr != nil:
		note = "backfill failed: " + berr.Error()
	}
	h.updateIncidentID(ctx, bd, b.id, id, func(i *incident.Incident) {
		i.Backfill = incident.Backfill{Ran: ran && berr == nil, Scanned: rep.Read, Filled: rep.Filled, NotFilled: rep.NotFilled, Note: note,
			Events: lostEvents(i.Dropped, recovered, i.Route)}
		if i.Backfill.Events != "" {
			i.Note(h.now(), h.cfg.NodeID, "%s", i.Backfill.Events)
		}
		i.Note(h.now(), h.cfg.NodeID, "backfill: %d read, %d already handled, %d answered late, %d not filled", rep.Read, rep.Known, rep.Filled, rep.NotFilled)
	})
	if noHistory && !dropped.IsZero() && recovered.After(dropped) {
		h.unchecked(ctx, bd, b.id, id, dropped, recovered, pending, noHistoryWhy(berr))
	}

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
		if !clock.Sleep(ctx, h.cfg.Clock, replayPoll) {
			return // the term ended: the next one replays what is left
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

// noHistoryWhy says why a gap's messages could not be read: the source's
// reason (WeCom's history not authorized, or not covering the gap), or
// that there is no source.
func noHistoryWhy(err error) string {
	if err != nil && err != ErrNoHistory && errors.Is(err, ErrNoHistory) {
		return err.Error()
	}
	return "no history source (backfill.history_url)"
}

// trailingPass reads the history once more at recovered + Overlap, so the
// reconciled range is [watermark − overlap, recovered + overlap]: a message
// WeCom failed to deliver in the first moments of the new connection is
// found too. It does not hold up the incident's data-complete time (that
// is when the gap itself was reconciled), and what it finds is added to
// the incident's backfill counts.
func (h *Health) trailingPass(ctx context.Context, bd *binding, b *botState, term *election.Term, id string, recovered time.Time) {
	if !clock.Sleep(ctx, h.cfg.Clock, recovered.Add(h.cfg.Overlap).Sub(h.now())) {
		return
	}
	rep, err := h.cfg.Backfill.Pass(ctx, term)
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

// owedWork is what a bot's tasks were owed when it came back (owed).
type owedWork struct {
	held  []string // tasks whose complete answer waits for delivery
	stale int      // streams begun before the return and still running
	chats []string // conversations of every task not delivered yet
	// streams are the streams open while the bot was away: what the user
	// last saw of each and until when it could have been shown more.
	streams []awayStream
}

// awayStream is one stream that was open when the bot went away: shown is
// the last frame the user saw of it (the record's PushedAt, or its first
// frame; the pusher writes progress frames every 10 s, not each, so
// PushedAt may be that far behind and a stream counted one status line
// more), until the end of what could have been shown on it (the bot's
// return, the answer's end, the stream's truncation or its window,
// whichever is first).
type awayStream struct {
	shown, until time.Time
}

// statusLines counts the status lines (push.heartbeat's "still working"
// line, or the queued line) the streams were owed while the bot was away
// from dropped on, and never got: the pusher shows one whenever a stream
// has shown nothing for every, so they fell due at shown + k·every (k ≥ 1);
// those before dropped were due while the bot was fine, and are not
// counted. A stream that had new content would have shown it instead, at
// least as often: the count is a lower bound of the progress updates not
// sent.
func (o owedWork) statusLines(dropped time.Time, every time.Duration) int {
	if every <= 0 {
		return 0
	}
	n := 0
	for _, s := range o.streams {
		first := int64(1) // k of the first line due at or after dropped
		if d := dropped.Sub(s.shown); d > 0 {
			first = max(first, int64((d+every-1)/every))
		}
		last := int64(s.until.Sub(s.shown) / every)
		if last >= first {
			n += int(last - first + 1)
		}
	}
	return n
}

// owed lists bot's tasks whose complete answer is waiting for delivery,
// counts the streams begun before recovered and still running (their
// progress while away is stale), lists the conversations of every task
// not delivered yet (they were active when the bot went away), and the
// streams that were open while it was away. Such a stream may already read
// truncated: the new term's pusher closes the old term's streams as soon
// as it starts, often before this count.
func (h *Health) owed(ctx context.Context, bd *binding, bot string, recovered time.Time) owedWork {
	var o owedWork
	ids, err := bd.store.UndeliveredTasks(ctx, bot)
	if err != nil {
		h.log.Warn().Err(err).Str("bot", bot).Msg("owed answers not counted")
		return o
	}
	for _, id := range ids {
		r, err := bd.tasks.Get(ctx, id)
		if err != nil {
			continue
		}
		if r.Chat != "" && !r.Delivery.Finished() && !slices.Contains(o.chats, r.Chat) {
			o.chats = append(o.chats, r.Chat)
		}
		if s, ok := h.openWhileAway(r, recovered); ok {
			o.streams = append(o.streams, s)
		}
		switch {
		case r.Delivery.Finished():
		case r.Exec.Finished():
			o.held = append(o.held, id)
		case (r.Delivery == task.Streaming || r.Delivery == task.Truncated) && !r.StreamStart.IsZero() && r.StreamStart.Before(recovered):
			o.stale++
		}
	}
	return o
}

// openWhileAway is r's stream as it was while the bot was away (until
// recovered), if r had one open: begun before recovered, not delivered.
func (h *Health) openWhileAway(r *task.Record, recovered time.Time) (awayStream, bool) {
	if r.Delivery.Finished() || r.StreamStart.IsZero() || !r.StreamStart.Before(recovered) {
		return awayStream{}, false
	}
	s := awayStream{shown: r.StreamStart, until: recovered}
	if r.PushedAt.After(s.shown) {
		s.shown = r.PushedAt
	}
	end := func(t time.Time) {
		if !t.IsZero() && t.Before(s.until) {
			s.until = t
		}
	}
	end(r.StreamStart.Add(h.cfg.StreamWindow))
	end(r.ExecDone())
	if r.Delivery == task.Truncated {
		// Closed before its answer was complete: no status line after
		// that (the answer is owed by push).
		for i := len(r.Transitions) - 1; i >= 0; i-- {
			if t := r.Transitions[i]; t.Dim == "delivery" && t.To == string(task.Truncated) {
				end(t.At)
				break
			}
		}
	}
	return s, true
}

// incomplete marks the conversations a backfill could not fill, and opens
// (or adds to) the bot's data incident: a person must know.
func (h *Health) incomplete(ctx context.Context, bd *binding, bot string, rep backfill.Report, outage string) {
	why := fmt.Sprintf("%d missed message(s) between %s and %s could not be answered", rep.NotFilled,
		rep.Since.UTC().Format(time.RFC3339), rep.Until.UTC().Format(time.RFC3339))
	if err := MarkIncomplete(ctx, bd.kv, bot, rep.Unfilled, why, h.now()); err != nil {
		h.log.Error().Err(err).Str("bot", bot).Msg("conversations not marked incomplete")
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

// maxUnchecked bounds the conversations one unchecked gap marks "may be
// incomplete" (and lists in its incidents, whose list has the same bound).
const maxUnchecked = 256

// unchecked is outage's gap [from, to] when no history source can say
// what was missed in it: nothing may be passed over in silence. The
// conversations active around the gap (pending, the chats of bot's tasks
// not delivered yet; and those whose context was written in [from −
// lookback, to], that is, an answer finished then) are marked "may be
// incomplete", so their next answer tells the user; a conversation whose
// only message fell into the gap, with no answer before it, is not known
// and not marked. A gap of at least Recovery.Threshold (an outage, not a
// blip reconnected at once) also opens the bot's data incident at level
// human: a person must look, as for a backfill that could not fill
// everything. A shorter one is recorded in the outage's incident only.
func (h *Health) unchecked(ctx context.Context, bd *binding, bot, outage string, from, to time.Time, pending []string, source string) {
	lookback := h.cfg.Overlap
	if lookback <= 0 {
		lookback = time.Minute // backfill's default overlap
	}
	chats := slices.Clone(pending)
	active, err := activeChats(ctx, bd.store.Context(), bot, from.Add(-lookback), to)
	if err != nil {
		h.log.Warn().Err(err).Str("bot", bot).Msg("conversations active around the gap not read; only those with tasks owed are marked")
	}
	for _, c := range active {
		if !slices.Contains(chats, c) {
			chats = append(chats, c)
		}
	}
	more := 0
	if len(chats) > maxUnchecked {
		more, chats = len(chats)-maxUnchecked, chats[:maxUnchecked]
	}
	why := fmt.Sprintf("%s: messages sent between %s and %s, while the bot was away, could not be checked for missed messages",
		source, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	if len(chats) > 0 {
		if err := MarkIncomplete(ctx, bd.kv, bot, chats, why, h.now()); err != nil {
			h.log.Error().Err(err).Str("bot", bot).Msg("conversations not marked incomplete")
		}
	}
	page := to.Sub(from) >= h.cfg.Recovery.Threshold
	now := h.now()
	h.updateIncidentID(ctx, bd, bot, outage, func(i *incident.Incident) {
		i.Incomplete = append(i.Incomplete[:0:0], chats...)
		i.Note(now, h.cfg.NodeID, "%s; %d conversation(s) active around the gap marked \"may be incomplete\"%s%s", why, len(chats),
			map[bool]string{true: fmt.Sprintf(" (%d more not marked)", more), false: ""}[more > 0],
			map[bool]string{true: "; a person is paged (data incident)", false: fmt.Sprintf("; shorter than recovery.threshold (%s): nobody paged", h.cfg.Recovery.Threshold)}[page])
	})
	if !page {
		return
	}
	next := fmt.Sprintf("bot %s's missed messages cannot be read (%s): look in WeCom at its conversations between %s and %s (those listed were active then and are marked \"may be incomplete\"), answer what was missed, then `botctl incidents ack <id>`",
		bot, source, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	inc := h.open(ctx, bd, incident.Incident{Bot: bot, Kind: incident.Data, Level: incident.Human, Signal: incident.SignalBackfill,
		Reason: "gap not checked: " + why, Next: next, Dropped: now, Detected: now})
	if inc == nil {
		return
	}
	h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
		for _, c := range chats {
			if len(i.Incomplete) < maxUnchecked && !slices.Contains(i.Incomplete, c) {
				i.Incomplete = append(i.Incomplete, c)
			}
		}
		i.Note(now, h.cfg.NodeID, "after outage %s: %s", outage, why)
	})
}

// activeChats lists bot's conversations whose context (the context bucket,
// written when an answer finishes) was last written in [since, until]. It
// reads the metadata of the bot's keys once, not their values: one
// consumer over the conversations of the last day (the bucket's TTL).
func activeChats(ctx context.Context, kv natsjs.KeyValue, bot string, since, until time.Time) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w, err := kv.Watch(ctx, jetstream.EncodeToken(bot)+".*", natsjs.MetaOnly())
	if err != nil {
		return nil, fmt.Errorf("watch the conversations of bot %s: %w", bot, err)
	}
	defer w.Stop()
	prefix := jetstream.EncodeToken(bot) + "."
	var chats []string
	for {
		select {
		case <-ctx.Done():
			return chats, fmt.Errorf("read the conversations of bot %s: %w", bot, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				return chats, nil // every current key seen
			}
			if e.Operation() != natsjs.KeyValuePut || e.Created().Before(since) || e.Created().After(until) {
				continue
			}
			if c, err := jetstream.DecodeToken(strings.TrimPrefix(e.Key(), prefix)); err == nil {
				chats = append(chats, c)
			}
		}
	}
}

// DeliveryFailed opens (or adds to) bot's data incident for an answer that
// could not be delivered, for good: the pusher's Health.DeliveryFailed.
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
