package health

import (
	"context"
	"errors"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/wecom"
)

// baselineSave is how often the leader saves its bot's baseline.
const baselineSave = time.Minute

// monitor watches one connection of b until it ends: it learns the
// baseline, flushes the record, and probes when a signal looks wrong. What
// to do and when is decided by a watch (decide.go); monitor performs it.
func (h *Health) monitor(ctx context.Context, term *election.Term, conn *wecom.Conn, b *botState) {
	t := clock.Or(h.cfg.Clock).NewTicker(h.cfg.Tick)
	defer t.Stop()
	w := newWatch(h.cfg.watchRules(), h.now())
	var (
		bl     *Baseline // this connection's (loaded from the bucket once bound)
		loaded bool
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-conn.Done():
			return
		case <-t.C():
		}
		now, v, bd := h.now(), conn.Vitals(), h.binding()
		bl, loaded = h.adoptBaseline(ctx, bd, b, bl, loaded)
		b.mu.Lock()
		s := sight{v: v, routes: conn.Routes(), silent: b.silent, silentRoute: b.silentRoute, baseline: *bl, bound: bd != nil, loaded: loaded}
		b.mu.Unlock()

		p := w.decide(now, s)
		if p.heard && b.endSilence() {
			h.post(b, func(ctx context.Context) { h.heard(ctx, b, term, conn, now) })
		}
		if p.learn != nil {
			b.mu.Lock()
			p.learn.apply(bl, now, h.cfg.Location)
			p.learn.applyRoutes(bl, now, h.cfg.Location, h.cfg.Limits)
			b.mu.Unlock()
		}
		if p.route != nil && h.judgeRoute(ctx, b, bd, conn, w, *p.route, now) {
			return
		}
		if sp := p.probe; sp != nil {
			err := conn.Probe(ctx, h.cfg.ProbeTimeout)
			if ctx.Err() != nil || conn.Reason() != wecom.ReasonNone {
				return // the connection's end is its own event
			}
			pv := w.probed(*sp, err)
			switch {
			case pv.close != nil:
				h.closeSick(b, conn, *pv.close)
				return
			case pv.late:
				h.log.Info().Str("bot", b.id).Str("reason", sp.reason).Msg("late heartbeat ack; the probe was acked")
			case pv.judge:
				since, until := sp.missedSpan(now)
				n, herr := h.missed(ctx, b.id, since, until)
				verdict, why := judgeSilence(now, h.cfg.Refute, s.v, n, herr)
				j := w.judged(now, *sp, verdict, why, verdict == deaf && h.silenceActed(ctx, b))
				switch {
				case j.close != nil:
					h.closeSick(b, conn, *j.close)
					return
				case j.unjudged:
					h.log.Warn().Str("bot", b.id).Str("reason", sp.reason+"; "+why).Msg("silence not judged")
				case j.note != "":
					h.log.Info().Str("bot", b.id).Str("baseline_note", j.note).Msg("silence alarm refuted")
					h.writeRecord(b, bd, nil, now, func(r *Record) { r.BaselineNote = j.note })
				}
				continue // a judged silence ends the tick: what settle writes waits for the next
			case pv.degrade != "":
				h.writeRecord(b, bd, conn, now, func(r *Record) {
					if r.State == Online {
						r.State = Degraded
					}
					r.Reason, r.LastFailure = pv.degrade, pv.degrade
				})
			}
		}
		st := w.settle(now, s)
		if st.online {
			h.writeRecord(b, bd, conn, now, func(r *Record) {
				if r.State == Degraded {
					r.State, r.Reason = Online, ""
				}
			})
		}
		if st.flush {
			h.writeRecord(b, bd, conn, now, func(r *Record) { stamp(r, s.v) })
		}
		if st.save {
			h.saveBaseline(b, bd, bl)
		}
	}
}

// adoptBaseline returns the baseline the connection learns into: the
// saved one once JetStream is bound (read once; what was learnt before
// is added to it), a fresh one until then. loaded: it is the saved one.
func (h *Health) adoptBaseline(ctx context.Context, bd *binding, b *botState, bl *Baseline, loaded bool) (*Baseline, bool) {
	if !loaded && bd != nil {
		// Each connection starts from the saved baseline: another node
		// may have led (and learnt) since this one last did.
		if saved, err := loadBaseline(ctx, bd.kv, b.id); err == nil {
			b.mu.Lock()
			if bl != nil {
				// Learnt before JetStream was bound: keep it.
				*saved = mergeBaselines(saved, bl)
			}
			b.baseline, b.baselineLoaded = saved, true
			b.mu.Unlock()
			return saved, true
		}
	}
	if bl == nil {
		bl = &Baseline{}
		b.mu.Lock()
		b.baseline = bl
		b.mu.Unlock()
	}
	return bl, loaded
}

// endSilence claims b's silence for the connection that hears callbacks:
// true for the one caller that ends it.
func (b *botState) endSilence() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	silent := b.silent || b.silentRoute != ""
	b.silent, b.silentRoute = false, ""
	return silent
}

// missed asks the history how many of bot's messages created in
// [since, until) were never handled (ErrNoHistory without a history
// source).
func (h *Health) missed(ctx context.Context, bot string, since, until time.Time) (int, error) {
	if h.cfg.Backfill == nil {
		return 0, ErrNoHistory
	}
	return h.cfg.Backfill.Missed(ctx, bot, since, until)
}

// writeRecord posts a write of b's record at now (none while JetStream is
// unbound). With conn, only while conn is still b's connection.
func (h *Health) writeRecord(b *botState, bd *binding, conn *wecom.Conn, now time.Time, fn func(*Record)) {
	if bd == nil {
		return
	}
	h.post(b, func(ctx context.Context) {
		if conn != nil && !h.current(b, conn) {
			return
		}
		h.setRecord(ctx, bd, b.id, now, fn)
	})
}

// saveBaseline posts a save of a snapshot of bl.
func (h *Health) saveBaseline(b *botState, bd *binding, bl *Baseline) {
	b.mu.Lock()
	snapshot := bl.clone()
	b.mu.Unlock()
	h.post(b, func(ctx context.Context) {
		if err := saveBaseline(ctx, bd.kv, b.id, &snapshot); err != nil && ctx.Err() == nil {
			h.log.Debug().Err(err).Str("bot", b.id).Msg("baseline not saved")
		}
	})
}

// mergeBaselines adds what fresh learnt to saved's counts.
func mergeBaselines(saved, fresh *Baseline) Baseline {
	out := *saved
	for i := range out.Hours {
		out.Hours[i].Events += fresh.Hours[i].Events
		out.Hours[i].Watched += fresh.Hours[i].Watched
	}
	if out.SendRate == 0 {
		out.SendRate = fresh.SendRate
	}
	out = out.clone()
	for k, fr := range fresh.Routes {
		r := out.route(k, BaselineLimits{})
		if r == nil {
			continue
		}
		for i := range r.Hours {
			r.Hours[i].Events += fr.Hours[i].Events
			r.Hours[i].Watched += fr.Hours[i].Watched
		}
	}
	return out
}

// current reports whether conn is still b's connection on this node.
func (h *Health) current(b *botState, conn *wecom.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conn == conn
}

// closeSick closes conn as unhealthy, leaving the cause for Ended.
func (h *Health) closeSick(b *botState, conn *wecom.Conn, cause closeCause) {
	b.mu.Lock()
	b.cause = &cause
	b.mu.Unlock()
	h.log.Warn().Str("bot", b.id).Str("signal", cause.signal).Str("reason", cause.reason).Msg("connection unhealthy: closing it to reconnect")
	conn.CloseUnhealthy(errors.New(cause.reason))
}

// silenceActed reports whether b's open incident is a silence incident
// already acted on (reconnected once): a second reconnect would not help.
func (h *Health) silenceActed(ctx context.Context, b *botState) bool {
	bd := h.binding()
	if bd == nil {
		return false
	}
	inc, err := bd.incidents.OpenFor(ctx, b.id, incident.Outage)
	return err == nil && inc != nil && inc.Signal == incident.SignalSilence
}

// closeCause is what the monitor knew when it closed a connection.
type closeCause struct {
	signal, reason string
	route          string // the silent route (SignalRouteSilence)
	dropped        time.Time
}

// classify says which signal found a connection's end, why, and when the
// bot was last known fine. An end the connection saw happen (a read error,
// a kick) is its own detection: dropped is now. An end inferred from
// silence (heartbeats or acks missing) dates back to the last evidence.
// termErr is why the connection's term ended, if it did.
func classify(reason wecom.CloseReason, err, termErr error, v wecom.Vitals, cause *closeCause, now time.Time) (signal, why string, dropped time.Time) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	switch reason {
	case wecom.ReasonUnhealthy:
		if cause != nil {
			return cause.signal, cause.reason, cause.dropped
		}
		return incident.SignalProbe, msg, v.LastEvidence()
	case wecom.ReasonHeartbeatLost:
		return incident.SignalProbe, "heartbeats unacked: " + msg, v.LastEvidence()
	case wecom.ReasonAckTimeouts:
		return incident.SignalOutbound, "frames unacked: " + msg, v.LastEvidence()
	case wecom.ReasonKicked:
		return incident.SignalConnection, "kicked: another connection subscribed with this bot's credentials (outside this cluster, if no node of it took over)", now
	case wecom.ReasonClosedByUs:
		why := "leadership lost"
		if termErr != nil {
			why += ": " + termErr.Error()
		}
		return incident.SignalConnection, why, now
	}
	return incident.SignalConnection, msg, now
}
