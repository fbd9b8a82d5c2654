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

// baselineSave is how often the leader saves its bot's baseline.
const baselineSave = time.Minute

// monitor watches one connection of b until it ends: it learns the
// baseline, flushes the record, and probes when a signal looks wrong.
func (h *Health) monitor(ctx context.Context, term *election.Term, conn *wecom.Conn, b *botState) {
	t := clock.Or(h.cfg.Clock).NewTicker(h.cfg.Tick)
	defer t.Stop()
	var (
		last, lastProbe, lastFlush, lastSave  time.Time
		seenCallbacks, seenOK, seenUnanswered int64
		refutedUntil                          time.Time // the current silence was refuted: no alarm before this
		bl                                    *Baseline // this connection's (loaded from the bucket once bound)
		loaded                                bool
		degraded                              string // why the record says degraded
	)
	last = h.now()
	lastFlush = last
	lastSave = last
	for {
		select {
		case <-ctx.Done():
			return
		case <-conn.Done():
			return
		case <-t.C():
		}
		now := h.now()
		v := conn.Vitals()
		events := v.Callbacks - seenCallbacks
		sends := v.AckedOK - seenOK
		seenCallbacks, seenOK = v.Callbacks, v.AckedOK
		if events > 0 {
			refutedUntil = time.Time{}
		}
		// A silence incident waits for the first callback on a connection
		// after it (on whichever node reconnected).
		if v.Callbacks > 0 {
			b.mu.Lock()
			silent := b.silent
			b.silent = false
			b.mu.Unlock()
			if silent {
				h.post(b, func(ctx context.Context) { h.heard(ctx, b, term, conn, now) })
			}
		}

		bd := h.binding()
		if !loaded && bd != nil {
			// Each connection starts from the saved baseline: another node
			// may have led (and learnt) since this one last did.
			if saved, err := loadBaseline(ctx, bd.kv, b.id); err == nil {
				b.mu.Lock()
				if bl != nil {
					// Learnt before JetStream was bound: keep it.
					*saved = mergeBaselines(saved, bl)
				}
				b.baseline, b.baselineLoaded, bl = saved, true, saved
				b.mu.Unlock()
				loaded = true
			}
		}
		if bl == nil {
			bl = &Baseline{}
			b.mu.Lock()
			b.baseline = bl
			b.mu.Unlock()
		}
		// Learn only while healthy: an outage's silence is not traffic.
		b.mu.Lock()
		waitingSilence := b.silent
		b.mu.Unlock()
		healthy := degraded == "" && v.FailedInARow == 0 && !waitingSilence
		if healthy {
			dt := now.Sub(last)
			b.mu.Lock()
			bl.Observe(now, h.cfg.Location, dt, events)
			if dt > 0 {
				bl.ObserveSends(float64(sends) / dt.Seconds())
			}
			b.mu.Unlock()
		}
		last = now

		// What looks wrong, most specific first.
		var suspicion, signal string
		if v.Unanswered > seenUnanswered {
			seenUnanswered = v.Unanswered
			suspicion, signal = fmt.Sprintf("a frame went unanswered (%d on this connection)", v.Unanswered), incident.SignalOutbound
		} else if v.FailedInARow > 0 && v.LastAckFail.After(lastProbe) {
			suspicion, signal = fmt.Sprintf("%d frames refused in a row", v.FailedInARow), incident.SignalOutbound
		} else if v.PingLate && v.LastPing.After(lastProbe) {
			// An idle bot's only traffic is the heartbeat: its first late
			// ack is probed at once (once per heartbeat), instead of
			// waiting for the connection's MaxMissedPings.
			suspicion, signal = fmt.Sprintf("the heartbeat sent %s ago is not acked", now.Sub(v.LastPing).Round(100*time.Millisecond)), incident.SignalProbe
		}
		heardAt := v.Connected
		if v.LastCallback.After(heardAt) {
			heardAt = v.LastCallback
		}
		b.mu.Lock()
		thr, opinion := bl.Threshold(now, h.cfg.Location, h.cfg.Limits)
		b.mu.Unlock()
		silentFor := now.Sub(heardAt)
		if suspicion == "" && opinion && now.After(refutedUntil) && silentFor > thr {
			suspicion, signal = fmt.Sprintf("no callback for %s (the baseline allows %s at this hour)", silentFor.Round(time.Second), thr.Round(time.Second)), incident.SignalSilence
		}

		if suspicion != "" && now.Sub(lastProbe) >= h.cfg.ProbeEvery {
			lastProbe = now
			err := conn.Probe(ctx, h.cfg.ProbeTimeout)
			switch {
			case ctx.Err() != nil || conn.Reason() != wecom.ReasonNone:
				return // the connection's end is its own event
			case err != nil:
				// The link is dead, whatever raised the suspicion. A
				// silence incident means a deaf connection (probes
				// answered, callbacks missing) and recovers only when
				// callbacks arrive again; a dead link recovers when a new
				// connection subscribes, as any dropped one does (an idle
				// bot may get no callback for hours).
				if signal == incident.SignalSilence {
					signal = incident.SignalProbe
				}
				h.closeSick(b, conn, signal, suspicion+"; probe not acked: "+err.Error(), v.LastEvidence())
				return
			case signal == incident.SignalProbe:
				// The heartbeat's ack was late, the probe's was not: a slow
				// moment, not a dead link.
				h.log.Info().Str("bot", b.id).Str("reason", suspicion).Msg("late heartbeat ack; the probe was acked")
			case signal == incident.SignalSilence:
				verdict, why := h.judgeSilence(ctx, b.id, heardAt, now, v)
				if verdict == unknown {
					refutedUntil = now.Add(thr)
					h.log.Warn().Str("bot", b.id).Str("reason", suspicion+"; "+why).Msg("silence not judged")
					continue
				}
				if verdict == quiet {
					refutedUntil = now.Add(thr)
					note := fmt.Sprintf("%s, but %s: a baseline problem, not an incident", suspicion, why)
					h.log.Info().Str("bot", b.id).Str("baseline_note", note).Msg("silence alarm refuted")
					if bd != nil {
						h.post(b, func(ctx context.Context) {
							h.setRecord(ctx, bd, b.id, now, func(r *Record) { r.BaselineNote = note })
						})
					}
					continue
				}
				if h.silenceActed(ctx, b) {
					refutedUntil = now.Add(thr) // reconnected once for this incident already: wait for traffic
					continue
				}
				h.closeSick(b, conn, incident.SignalSilence, suspicion+"; "+why, heardAt.UTC())
				return
			default:
				// Frames fail but the link answers: degraded, not down.
				if degraded != suspicion {
					degraded = suspicion
					if bd != nil {
						h.post(b, func(ctx context.Context) {
							if !h.current(b, conn) {
								return
							}
							h.setRecord(ctx, bd, b.id, now, func(r *Record) {
								if r.State == Online {
									r.State = Degraded
								}
								r.Reason, r.LastFailure = suspicion, suspicion
							})
						})
					}
				}
			}
		}
		if degraded != "" && v.FailedInARow == 0 && v.LastAckOK.After(v.LastAckFail) {
			degraded = ""
			if bd != nil {
				h.post(b, func(ctx context.Context) {
					if !h.current(b, conn) {
						return
					}
					h.setRecord(ctx, bd, b.id, now, func(r *Record) {
						if r.State == Degraded {
							r.State, r.Reason = Online, ""
						}
					})
				})
			}
		}
		if bd != nil && now.Sub(lastFlush) >= h.cfg.RecordInterval {
			lastFlush = now
			h.post(b, func(ctx context.Context) {
				if !h.current(b, conn) {
					return
				}
				h.setRecord(ctx, bd, b.id, now, func(r *Record) { stamp(r, v) })
			})
		}
		if bd != nil && loaded && now.Sub(lastSave) >= baselineSave {
			lastSave = now
			b.mu.Lock()
			snapshot := *bl
			b.mu.Unlock()
			h.post(b, func(ctx context.Context) {
				if err := saveBaseline(ctx, bd.kv, b.id, &snapshot); err != nil && ctx.Err() == nil {
					h.log.Debug().Err(err).Str("bot", b.id).Msg("baseline not saved")
				}
			})
		}
	}
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
	return out
}

type silenceVerdict int

const (
	quiet   silenceVerdict = iota // the users are quiet
	deaf                          // the server no longer delivers to this connection
	unknown                       // cannot tell now (the history or the task store unreadable)
)

// judgeSilence cross-checks a silence the baseline finds suspicious (the
// probe was acked, so the link is up). The history, where there is one,
// decides: messages created since the last callback and never handled mean
// a deaf connection, none mean quiet users. Without a history, the
// outbound signal decides: a frame acked within Refute says the
// connection works, so the silence is quiet users (a baseline problem);
// otherwise it is deaf.
func (h *Health) judgeSilence(ctx context.Context, bot string, heardAt, now time.Time, v wecom.Vitals) (silenceVerdict, string) {
	if h.cfg.Backfill != nil {
		// Messages of the last seconds may be in the handlers still. Any
		// error but ErrNoHistory (the history or the task store could not
		// be read): the silence is not judged now; reconnecting WeCom
		// would not mend either.
		n, err := h.cfg.Backfill.Missed(ctx, bot, heardAt.Add(-time.Second), now.Add(-2*time.Second))
		switch {
		case err == nil && n > 0:
			return deaf, fmt.Sprintf("the history has %d message(s) since then that never arrived: the server no longer delivers to this connection", n)
		case err == nil:
			return quiet, "the history has no message since then: the users are quiet"
		case !errors.Is(err, ErrNoHistory):
			return unknown, "the history could not be checked (" + err.Error() + "): not judged now"
		}
	}
	if !v.LastAckOK.IsZero() && now.Sub(v.LastAckOK) < h.cfg.Refute {
		return quiet, fmt.Sprintf("a frame was acked %s ago and the probe was acked", now.Sub(v.LastAckOK).Round(time.Second))
	}
	return deaf, "the probe was acked and no frame was acked recently: the server no longer delivers to this connection"
}

// current reports whether conn is still b's connection on this node.
func (h *Health) current(b *botState, conn *wecom.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conn == conn
}

// closeSick closes conn as unhealthy, leaving the cause for Ended.
func (h *Health) closeSick(b *botState, conn *wecom.Conn, signal, reason string, dropped time.Time) {
	b.mu.Lock()
	b.cause = &closeCause{signal: signal, reason: reason, dropped: dropped}
	b.mu.Unlock()
	h.log.Warn().Str("bot", b.id).Str("signal", signal).Str("reason", reason).Msg("connection unhealthy: closing it to reconnect")
	conn.CloseUnhealthy(errors.New(reason))
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
	dropped        time.Time
}

// classify says which signal found a connection's end, why, and when the
// bot was last known fine. An end the connection saw happen (a read error,
// a kick) is its own detection: dropped is now. An end inferred from
// silence (heartbeats or acks missing) dates back to the last evidence.
func classify(reason wecom.CloseReason, err error, term *election.Term, v wecom.Vitals, cause *closeCause, now time.Time) (signal, why string, dropped time.Time) {
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
		if err := term.Err(); err != nil {
			why += ": " + err.Error()
		}
		return incident.SignalConnection, why, now
	}
	return incident.SignalConnection, msg, now
}
