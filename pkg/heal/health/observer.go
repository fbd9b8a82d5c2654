package health

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/wecom"
)

// The node.Observer hooks: each event of a bot's term (dialing, dialed,
// ended, a foreign holder, an auth hold) and the first callback after a
// silence becomes a step of the bot's incident and a write of its health
// record, posted to the bot's event queue so the election loop never waits.

// Dialing implements node.Observer: this node leads the bot and dials.
// A holder that vanished without a word (its record still says it is
// online) is an incident found now; an open incident gets its first
// action: the reconnect.
func (h *Health) Dialing(term *election.Term) {
	b, now := h.bot(term.Bot), h.now()
	h.post(b, func(ctx context.Context) {
		bd := h.binding()
		if bd == nil || term.Err() != nil {
			return
		}
		rec, err := Load(ctx, bd.kv, b.id)
		if err != nil {
			h.log.Warn().Err(err).Str("bot", b.id).Msg("health record unreadable")
			return
		}
		inc, err := bd.incidents.OpenFor(ctx, b.id, incident.Outage)
		if err != nil {
			h.log.Warn().Err(err).Str("bot", b.id).Msg("open incident unreadable")
			return
		}
		if inc == nil {
			if found := takeover(now, b.id, rec, h.cfg.Recovery.Threshold, h.cfg.NodeID, term.Rev); found != nil {
				inc = h.open(ctx, bd, *found)
			}
		}
		if inc == nil {
			return
		}
		h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
			i.Acted(now, fmt.Sprintf("auto: reconnect by node %s (term %d)", h.cfg.NodeID, term.Rev))
			i.Note(now, h.cfg.NodeID, "reconnecting (term %d)", term.Rev)
		})
	})
}

// Dialed implements node.Observer.
func (h *Health) Dialed(term *election.Term, conn *wecom.Conn, err error) {
	b, now := h.bot(term.Bot), h.now()
	if err != nil {
		auth := errors.Is(err, wecom.ErrAuthFailed)
		if auth {
			b.mu.Lock()
			b.authFailed = now
			b.mu.Unlock()
		}
		h.post(b, func(ctx context.Context) { h.dialFailed(ctx, b, term, err, auth, now) })
		return
	}
	b.mu.Lock()
	b.conn, b.term, b.cause = conn, term.Rev, nil
	b.mu.Unlock()
	mctx, cancel := context.WithCancel(term.Context())
	h.wg.Go(func() {
		defer cancel()
		h.monitor(mctx, term, conn, b)
	})
	h.post(b, func(ctx context.Context) { h.connected(ctx, b, term, conn, now) })
}

func (h *Health) dialFailed(ctx context.Context, b *botState, term *election.Term, err error, auth bool, now time.Time) {
	bd := h.binding()
	if bd == nil {
		return
	}
	if auth {
		next := fmt.Sprintf("WeCom rejected the secret of bot %s: check the bot in the WeCom admin console, put the right secret in bots[].secret_file (or BOTCTL_BOT_<ID>_SECRET) on every node and restart them, then run `botctl incidents ack <id>` to retry at once; until then botctl tries the credentials again only after a long backoff (30 s doubling to 10 min)", b.id)
		inc := h.open(ctx, bd, incident.Incident{Bot: b.id, Signal: incident.SignalAuth, Level: incident.Human,
			Reason: "WeCom refused the bot's credentials: " + err.Error(), Next: next, Dropped: now, Detected: now, TermRev: term.Rev})
		if inc != nil {
			h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
				if i.Level != incident.Human || i.Signal != incident.SignalAuth {
					i.Level, i.Signal, i.Next = incident.Human, incident.SignalAuth, next
					i.Reason = "WeCom refused the bot's credentials: " + err.Error()
				}
				i.Note(now, h.cfg.NodeID, "subscribe refused for credentials; retrying when acknowledged or after a long backoff")
			})
		}
		h.setRecord(ctx, bd, b.id, now, func(r *Record) {
			r.State, r.Reason, r.Handover = NeedsHuman, "WeCom refused the credentials: fix the secret, then `botctl incidents ack`", false
			if inc != nil {
				r.Incident = inc.ID
			}
		})
		return
	}
	rec, lerr := Load(ctx, bd.kv, b.id)
	if lerr != nil {
		return
	}
	dropped := now
	if rec.Handover {
		dropped = rec.Since
	}
	inc := h.open(ctx, bd, incident.Incident{Bot: b.id, Signal: incident.SignalConnection, Level: incident.Auto,
		Reason: "cannot connect to WeCom: " + err.Error(), Dropped: dropped, Detected: now, TermRev: term.Rev})
	if inc != nil {
		h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
			i.Acted(now, fmt.Sprintf("auto: reconnect by node %s", h.cfg.NodeID))
			i.Note(now, h.cfg.NodeID, "connect failed: %v", err)
		})
	}
	h.setRecord(ctx, bd, b.id, now, func(r *Record) {
		if r.State != NeedsHuman {
			r.State = Offline
		}
		r.Reason, r.Handover, r.LastFailure = "cannot connect: "+err.Error(), false, err.Error()
		if inc != nil {
			r.Incident = inc.ID
		}
	})
}

// connected records a subscribed connection: the bot is back if it had an
// incident (half-open first after a long outage), and its compensation
// runs.
func (h *Health) connected(ctx context.Context, b *botState, term *election.Term, conn *wecom.Conn, now time.Time) {
	bd := h.binding()
	if bd == nil || term.Err() != nil {
		return // the term is over: its end is the next event
	}
	inc, err := bd.incidents.OpenFor(ctx, b.id, incident.Outage)
	if err != nil {
		h.log.Warn().Err(err).Str("bot", b.id).Msg("open incident unreadable")
	}
	state, why := Online, ""
	halfOpen := false
	if inc != nil && waitsForCallbacks(inc.Signal) && inc.Recovered.IsZero() {
		// Whichever node reconnects watches for callbacks to come back
		// (of the silent route only, after a route's silence).
		state, why = Degraded, "reconnected after a silence: waiting for callbacks to arrive again"
		b.mu.Lock()
		if inc.Signal == incident.SignalRouteSilence {
			why = fmt.Sprintf("resubscribed after %s went silent: waiting for its callbacks", inc.Route)
			if inc.Level == incident.Human {
				state = NeedsHuman
			}
			b.silentRoute = inc.Route
		} else {
			b.silent = true
		}
		b.mu.Unlock()
	}
	if inc != nil && !waitsForCallbacks(inc.Signal) {
		halfOpen = halfOpenAfter(inc.Dropped, now, h.cfg.Recovery.Threshold)
		inc = h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
			i.Acted(now, fmt.Sprintf("auto: reconnect by node %s", h.cfg.NodeID))
			i.Recovered, i.State = now, incident.Recovering
			i.Online, i.DataComplete = time.Time{}, time.Time{}
			i.HalfOpen = i.HalfOpen || halfOpen
			if !halfOpen {
				i.Online = now
			}
			i.Note(now, h.cfg.NodeID, "connected again (term %d) after %s down%s", term.Rev, now.Sub(i.Dropped).Round(time.Millisecond),
				map[bool]string{true: "; half-open", false: ""}[halfOpen])
		})
		if halfOpen {
			state = HalfOpen
		}
	}
	h.setRecord(ctx, bd, b.id, now, func(r *Record) {
		r.State, r.Reason, r.Node, r.TermRev, r.Handover = state, why, h.cfg.NodeID, term.Rev, false
		if state == HalfOpen {
			r.Reason = "half-open after an outage: probing before the backlog"
		}
		r.Incident = ""
		if inc != nil {
			r.Incident = inc.ID
		}
	})
	// Bound to this connection, not only the term: a term may reconnect
	// after a blip (pkg/node), and the next connection's compensation
	// must not run beside this one's.
	tctx, endConn := context.WithCancel(term.Context())
	h.wg.Go(func() {
		defer endConn()
		select {
		case <-conn.Done():
		case <-tctx.Done():
		}
	})
	if halfOpen && inc != nil {
		id := inc.ID
		h.wg.Go(func() { h.halfOpen(tctx, bd, b, conn, id) })
	}
	var id string
	if inc != nil && !waitsForCallbacks(inc.Signal) {
		id = inc.ID
	}
	h.wg.Go(func() { h.compensate(tctx, bd, b, term, id, now) })
}

// handoverWrite bounds how long a graceful Ended waits for its record.
const handoverWrite = 3 * time.Second

// Ended implements node.Observer. A graceful end returns once its
// handover is recorded (at most handoverWrite); any other returns at once.
func (h *Health) Ended(term *election.Term, conn *wecom.Conn, graceful bool) {
	b, now := h.bot(term.Bot), h.now()
	b.mu.Lock()
	cause := b.cause
	b.cause = nil
	if b.conn == conn {
		b.conn = nil
	}
	b.mu.Unlock()
	v := conn.Vitals()
	reason, cerr := conn.Reason(), conn.Err()
	written := make(chan struct{})
	if graceful {
		// A handover's record must be in the bucket before the term is
		// resigned, or the next leader reads "online" and takes the
		// handover for a leader that vanished without a word. Bounded: a
		// JetStream that does not answer costs a false incident, not a
		// stuck shutdown.
		defer func() {
			t := clock.Or(h.cfg.Clock).NewTimer(handoverWrite)
			defer t.Stop()
			select {
			case <-written:
			case <-t.C():
				h.log.Warn().Str("bot", b.id).Msg("handover not recorded in time; the next leader may report a takeover")
			}
		}()
	}
	h.post(b, func(ctx context.Context) {
		defer close(written)
		bd := h.binding()
		if bd == nil {
			return
		}
		if graceful {
			h.setRecord(ctx, bd, b.id, now, func(r *Record) {
				r.State, r.Handover, r.Node, r.TermRev = Offline, true, h.cfg.NodeID, term.Rev
				r.Reason = fmt.Sprintf("handover: node %s stopped its term on purpose", h.cfg.NodeID)
				stamp(r, v)
			})
			return
		}
		if rec, err := Load(ctx, bd.kv, b.id); err == nil && rec.TermRev > term.Rev {
			// A newer term (a standby that deposed this node while it
			// hung, or took over after its lease ran out) has already
			// connected and written the record: this end is that
			// handover seen late. Opening an incident now would leave it
			// open for good (the newer term recovered before it existed),
			// and writing the record would overwrite the newer term's.
			h.log.Info().Str("bot", b.id).Int64("term", term.Rev).Int64("newer_term", rec.TermRev).Str("newer_node", rec.Node).
				Stringer("reason", reason).Msg("connection of a superseded term ended: a handover, not an incident")
			return
		}
		signal, why, dropped := classify(reason, cerr, term.Err(), v, cause, now)
		route := ""
		b.mu.Lock()
		switch signal {
		case incident.SignalSilence:
			b.silent = true
		case incident.SignalRouteSilence:
			route = cause.route
			b.silentRoute = route
		}
		b.mu.Unlock()
		inc := h.open(ctx, bd, incident.Incident{Bot: b.id, Signal: signal, Level: incident.Auto, Reason: why,
			Route: route, Dropped: dropped, Detected: now, TermRev: term.Rev})
		if inc != nil {
			h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
				if i.State == incident.Recovering {
					// Down again before its data was complete or its
					// half-open was over: the same incident, open again.
					i.State, i.Recovered, i.Online, i.DataComplete = incident.Open, time.Time{}, time.Time{}, time.Time{}
				}
				i.Note(now, h.cfg.NodeID, "connection ended (%s): %s", reason, why)
			})
		}
		h.setRecord(ctx, bd, b.id, now, func(r *Record) {
			r.State, r.Reason, r.Handover, r.Node, r.TermRev = Offline, why, false, h.cfg.NodeID, term.Rev
			stamp(r, v)
			if inc != nil {
				r.Incident = inc.ID
			}
		})
	})
}

// Conflict implements node.Observer: a second holder of the bot's
// credentials keeps kicking the cluster's connection. The bot's incident
// becomes human (signal env_gate): only a person can stop the other one.
func (h *Health) Conflict(bot, reason string) {
	b, now := h.bot(bot), h.now()
	h.post(b, func(ctx context.Context) {
		bd := h.binding()
		if bd == nil {
			return
		}
		next := nextAction(incident.SignalGate, bot)
		inc := h.open(ctx, bd, incident.Incident{Bot: bot, Signal: incident.SignalGate, Level: incident.Human, Reason: reason,
			Next: next, Dropped: now, Detected: now})
		if inc != nil {
			h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
				if i.Level != incident.Human || i.Signal != incident.SignalGate {
					i.Level, i.Signal, i.Next, i.Reason = incident.Human, incident.SignalGate, next, reason
				}
				i.Note(now, h.cfg.NodeID, "another holder of the credentials keeps kicking this cluster: %s", reason)
			})
		}
		h.setRecord(ctx, bd, bot, now, func(r *Record) {
			r.State, r.Reason, r.Handover = NeedsHuman, reason, false
			if inc != nil {
				r.Incident = inc.ID
			}
		})
	})
}

// AuthHold implements node.Observer: after rejected credentials the node
// does not campaign for the bot again until a person acknowledges its
// incident (or the incident is closed), or retry has passed: then it tries
// the credentials once more, so that a refusal of a few seconds (WeCom's
// side, a secret rotated in the console and back) does not hold the bot
// until a person acts. The node doubles retry each time (AuthBackoff to
// AuthBackoffMax: one refused subscribe per wait, which kicks nobody).
func (h *Health) AuthHold(ctx context.Context, bot string, retry time.Duration) bool {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	h.Settle(sctx, bot)
	cancel()
	bd := h.binding()
	if bd == nil {
		return false
	}
	b := h.bot(bot)
	b.mu.Lock()
	failed := b.authFailed
	b.mu.Unlock()
	clk := clock.Or(h.cfg.Clock)
	t := clk.NewTicker(2 * time.Second)
	defer t.Stop()
	deadline := clk.NewTimer(retry)
	defer deadline.Stop()
	for {
		inc, err := bd.incidents.OpenFor(ctx, bot, incident.Outage)
		if err == nil && (inc == nil || inc.AckedAt.After(failed)) {
			if inc != nil {
				h.log.Info().Str("bot", bot).Str("incident", inc.ID).Str("acked_by", inc.AckedBy).Msg("incident acknowledged: trying the credentials again")
			}
			return true
		}
		select {
		case <-ctx.Done():
			return true
		case <-deadline.C():
			h.log.Info().Str("bot", bot).Dur("after", retry).Msg("no acknowledgement yet: trying the credentials again (a refusal of seconds must not hold the bot)")
			return true
		case <-t.C():
		}
	}
}

// heard is a callback on b's connection conn: a silence incident is
// over, and its compensation (a backfill pass over the silent gap) runs.
// A silence of at least Recovery.Threshold is an outage like any other:
// the bot is half-open on conn (probes, the backlog held, then drained
// below its normal rate) before it is online.
func (h *Health) heard(ctx context.Context, b *botState, term *election.Term, conn *wecom.Conn, now time.Time) {
	bd := h.binding()
	if bd == nil {
		return
	}
	inc, err := bd.incidents.OpenFor(ctx, b.id, incident.Outage)
	if err != nil || inc == nil || !waitsForCallbacks(inc.Signal) || !inc.Recovered.IsZero() {
		return
	}
	// Half-open runs on the connection that heard: one already closed
	// has no recovery to run (its end is the next event). A route's
	// silence needs none: the bot answered its other chats throughout.
	halfOpen := halfOpenAfter(inc.Dropped, now, h.cfg.Recovery.Threshold) && h.current(b, conn) && inc.Signal != incident.SignalRouteSilence
	inc = h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
		i.Recovered, i.State = now, incident.Recovering
		i.Online = now
		if halfOpen {
			i.Online, i.HalfOpen = time.Time{}, true
		}
		i.Note(now, h.cfg.NodeID, "callbacks arrive again after %s of silence%s", now.Sub(i.Dropped).Round(time.Second),
			map[bool]string{true: "; half-open", false: ""}[halfOpen])
	})
	h.setRecord(ctx, bd, b.id, now, func(r *Record) {
		r.State, r.Reason = Online, ""
		if halfOpen {
			r.State, r.Reason = HalfOpen, "half-open after a silence: probing before the backlog"
		}
	})
	if inc != nil {
		id := inc.ID
		tctx := term.Context()
		if halfOpen {
			h.wg.Go(func() { h.halfOpen(tctx, bd, b, conn, id) })
		}
		h.wg.Go(func() { h.compensate(tctx, bd, b, term, id, now) })
	}
}

// waitsForCallbacks: an incident of signal (a silence, of the bot or of
// one route) recovers when callbacks arrive again, not when a connection
// subscribes.
func waitsForCallbacks(signal string) bool {
	return signal == incident.SignalSilence || signal == incident.SignalRouteSilence
}
