package health

import (
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/wecom"
)

// The monitor's decisions, apart from its effects: what one tick of a
// connection's vitals makes suspicious, whether and when to probe, what the
// probe's answer and the history make of a suspicion, and when the record
// and the baseline are written; and, for the observer, the incident a new
// leader finds (takeover) and when a bot back goes half-open. Every function here reads no clock, does
// no I/O and starts nothing: its time is the now it is given, so each is
// tested as a table of single steps (decide_test.go).

// watchRules are the monitor's timing and baseline settings.
type watchRules struct {
	// ProbeEvery spaces the probes suspicions ask for; the first is asked
	// at once.
	ProbeEvery time.Duration
	// RecordInterval: the connection's timestamps are written at most this
	// often (state changes at once).
	RecordInterval time.Duration
	// SaveEvery: the baseline is saved at most this often.
	SaveEvery time.Duration
	// Refute: a frame acked this recently refutes a silence (without a
	// history source).
	Refute   time.Duration
	Location *time.Location
	Limits   BaselineLimits
}

func (c *Config) watchRules() watchRules {
	return watchRules{ProbeEvery: c.ProbeEvery, RecordInterval: c.RecordInterval, SaveEvery: baselineSave,
		Refute: c.Refute, Location: c.Location, Limits: c.Limits}
}

// watch is what a monitor remembers of its connection between ticks.
type watch struct {
	rules     watchRules
	last      time.Time // the previous tick: the span the baseline learns from
	lastProbe time.Time // the latest probe asked
	lastFlush time.Time // the latest timestamps written to the record
	lastSave  time.Time // the latest baseline saved

	seenCallbacks, seenOK, seenUnanswered int64
	// seenRoutes: each route's callbacks on this connection at the last
	// tick.
	seenRoutes map[string]int64
	// routeRefuted: a route's silence was judged: no alarm for it before
	// this, unless it speaks meanwhile.
	routeRefuted map[string]time.Time

	// refutedUntil: the current silence was judged (refuted, not judged,
	// or acted on already): no silence alarm before this.
	refutedUntil time.Time
	// degraded is why the record says degraded ("": it does not).
	degraded string
}

// newWatch starts watching a connection at start.
func newWatch(rules watchRules, start time.Time) *watch {
	return &watch{rules: rules, last: start, lastFlush: start, lastSave: start,
		seenRoutes: map[string]int64{}, routeRefuted: map[string]time.Time{}}
}

// sight is what one tick sees.
type sight struct {
	v wecom.Vitals
	// routes are the connection's callbacks by route (Conn.Routes).
	routes map[string]wecom.RouteVitals
	// silent: the bot's silence incident waits for callbacks to arrive
	// again (botState.silent). silentRoute: its route silence incident
	// waits for callbacks of this route (botState.silentRoute).
	silent      bool
	silentRoute string
	// baseline is this connection's, as learnt so far (a copy).
	baseline Baseline
	// bound: JetStream is bound, the record can be written. loaded: the
	// baseline is the saved one, and only then is it saved back.
	bound, loaded bool
}

// tickPlan is what a tick does, in this order.
type tickPlan struct {
	// heard: callbacks arrive on this connection while the bot's silence
	// incident waits for them: the silence is over (Health.heard).
	heard bool
	// learn is what the baseline learns from this tick; nil while the
	// connection is not healthy (an outage's silence is not traffic).
	learn *learning
	// probe is the suspicion to probe now; nil: none, or the last probe
	// was less than ProbeEvery ago.
	probe *suspicion
	// route is a route silent while the others deliver, to judge now
	// (judgeRouteSilence, then judgedRoute); no probe: the connection's
	// other callbacks show it is alive.
	route *suspicion
}

// learning is one tick's traffic: events and frames acked in dt.
type learning struct {
	dt            time.Duration
	events, sends int64
	// routes: each route's callbacks in dt (those heard on this
	// connection; a route of the baseline not among them had none).
	routes map[string]int64
	// skip: the route whose silence incident waits for it: its silence
	// is not traffic, and not learnt.
	skip string
}

// apply adds l, ending at now, to b.
func (l learning) apply(b *Baseline, now time.Time, loc *time.Location) {
	b.Observe(now, loc, l.dt, l.events)
	if l.dt > 0 {
		b.ObserveSends(float64(l.sends) / l.dt.Seconds())
	}
}

// applyRoutes adds l's routes, ending at now, to b's route baselines
// (admitting new routes while there is room: Baseline.route).
func (l learning) applyRoutes(b *Baseline, now time.Time, loc *time.Location, lim BaselineLimits) {
	for key := range l.routes {
		if key != l.skip {
			b.route(key, lim)
		}
	}
	for key, r := range b.Routes {
		if key != l.skip {
			r.Observe(now, loc, l.dt, l.routes[key])
		}
	}
}

// suspicion is a signal that looks wrong, to be checked by a probe.
type suspicion struct {
	signal string // incident.SignalOutbound, SignalProbe, SignalSilence or SignalRouteSilence
	route  string // the silent route (SignalRouteSilence)
	reason string
	// heardAt is the last callback on the connection (its subscribe, if
	// none); threshold is the silence the baseline allows now.
	heardAt   time.Time
	threshold time.Duration
	// evidence is the latest moment the connection was known to work.
	evidence time.Time
}

// decide is one tick at now: what the vitals say, what the baseline learns,
// and whether to probe. Most specific suspicion first: a frame unanswered,
// frames refused (new since the last probe), a late heartbeat ack (once per
// heartbeat), then a silence longer than the baseline allows at this hour
// (once it has an opinion, and not before a judged silence's refutedUntil).
func (w *watch) decide(now time.Time, s sight) tickPlan {
	var p tickPlan
	v := s.v
	events, sends := v.Callbacks-w.seenCallbacks, v.AckedOK-w.seenOK
	w.seenCallbacks, w.seenOK = v.Callbacks, v.AckedOK
	if events > 0 {
		w.refutedUntil = time.Time{}
	}
	// A silence incident waits for the first callback on a connection
	// after it (on whichever node reconnected); a route silence for the
	// first of its route.
	p.heard = s.silent && v.Callbacks > 0 || s.silentRoute != "" && s.routes[s.silentRoute].Callbacks > 0
	waitingSilence := s.silent && !p.heard
	routes := w.routeDeltas(s)
	if w.degraded == "" && v.FailedInARow == 0 && !waitingSilence {
		p.learn = &learning{dt: now.Sub(w.last), events: events, sends: sends, routes: routes}
		if !p.heard {
			p.learn.skip = s.silentRoute
		}
		p.learn.apply(&s.baseline, now, w.rules.Location)
	}
	w.last = now

	var sp suspicion
	switch {
	case v.Unanswered > w.seenUnanswered:
		w.seenUnanswered = v.Unanswered
		sp.signal, sp.reason = incident.SignalOutbound, fmt.Sprintf("a frame went unanswered (%d on this connection)", v.Unanswered)
	case v.FailedInARow > 0 && v.LastAckFail.After(w.lastProbe):
		sp.signal, sp.reason = incident.SignalOutbound, fmt.Sprintf("%d frames refused in a row", v.FailedInARow)
	case v.PingLate && v.LastPing.After(w.lastProbe):
		// An idle bot's only traffic is the heartbeat: its first late ack
		// is probed at once, instead of waiting for the connection's
		// MaxMissedPings.
		sp.signal, sp.reason = incident.SignalProbe, fmt.Sprintf("the heartbeat sent %s ago is not acked", now.Sub(v.LastPing).Round(100*time.Millisecond))
	}
	sp.heardAt = v.Connected
	if v.LastCallback.After(sp.heardAt) {
		sp.heardAt = v.LastCallback
	}
	thr, opinion := s.baseline.Threshold(now, w.rules.Location, w.rules.Limits)
	sp.threshold, sp.evidence = thr, v.LastEvidence()
	if silentFor := now.Sub(sp.heardAt); sp.signal == "" && opinion && now.After(w.refutedUntil) && silentFor > thr {
		sp.signal, sp.reason = incident.SignalSilence, fmt.Sprintf("no callback for %s (the baseline allows %s at this hour)", silentFor.Round(time.Second), thr.Round(time.Second))
	}
	if sp.signal != "" && now.Sub(w.lastProbe) >= w.rules.ProbeEvery {
		w.lastProbe = now
		p.probe = &sp
	}
	if sp.signal == "" && !s.silent {
		p.route = w.routeSilence(now, s)
	}
	return p
}

// routeDeltas is each route's callbacks since the last tick (every route
// heard on the connection, 0 for those not heard since); a route that
// speaks ends its judged silence.
func (w *watch) routeDeltas(s sight) map[string]int64 {
	out := make(map[string]int64, len(s.routes))
	for key, rv := range s.routes {
		d := rv.Callbacks - w.seenRoutes[key]
		w.seenRoutes[key] = rv.Callbacks
		if d > 0 {
			delete(w.routeRefuted, key)
		}
		out[key] = d
	}
	return out
}

// routeSilence is the longest silence of a group whose baseline has an
// opinion at now, if it is longer than that baseline allows while the
// connection's other routes still deliver: a callback of another route
// came after the group's last one (its subscribe, if none on this
// connection) and within the group's threshold of now. A bot silent on
// every route is the bot's silence (decide), not a route's. Not before a
// judged silence's routeRefuted.
func (w *watch) routeSilence(now time.Time, s sight) *suspicion {
	var worst *suspicion
	var worstFor time.Duration
	for key, rb := range s.baseline.Routes {
		if !wecom.IsGroupRoute(key) || now.Before(w.routeRefuted[key]) {
			continue
		}
		thr, opinion := rb.Threshold(now, w.rules.Location, w.rules.Limits)
		if !opinion {
			continue
		}
		heardAt := s.v.Connected
		if last := s.routes[key].LastCallback; last.After(heardAt) {
			heardAt = last
		}
		silentFor := now.Sub(heardAt)
		othersAlive := s.v.LastCallback.After(heardAt) && now.Sub(s.v.LastCallback) <= thr
		if silentFor <= thr || !othersAlive || silentFor <= worstFor {
			continue
		}
		worstFor = silentFor
		worst = &suspicion{signal: incident.SignalRouteSilence, route: key, heardAt: heardAt, threshold: thr, evidence: heardAt,
			reason: fmt.Sprintf("no callback from %s for %s (its baseline allows %s at this hour) while the bot's other chats still deliver (the latest %s ago)",
				key, silentFor.Round(time.Second), thr.Round(time.Second), now.Sub(s.v.LastCallback).Round(time.Second))}
	}
	return worst
}

// judgeRouteSilence cross-checks a route's silence (the connection is
// alive: other routes deliver). missed and err are the history's answer
// over s.missedSpan, as for judgeSilence. The history, where there is one,
// decides: messages never handled mean the route is deaf, none that its
// users are quiet, an unreadable history judges nothing now. Without a
// history the route is taken as deaf: the outbound signal cannot refute
// it (the bot answers its other chats), and the action, one resubscribe,
// costs a reconnect of a few milliseconds.
func judgeRouteSilence(missed int, err error) (silenceVerdict, string) {
	switch {
	case err == nil && missed > 0:
		return deaf, fmt.Sprintf("the history has %d message(s) since then that never arrived", missed)
	case err == nil:
		return quiet, "the history has no message since then: its users are quiet"
	case !errors.Is(err, ErrNoHistory):
		return unknown, "the history could not be checked (" + err.Error() + "): not judged now"
	}
	return deaf, "no history source to refute it: taken as deaf"
}

// routeJudgment is what a judged route silence comes to.
type routeJudgment struct {
	// close: a deaf route not yet acted on: close the connection (the
	// monitor ends) to resubscribe on a fresh one.
	close *closeCause
	// page: a deaf route that a fresh connection did not mend: the bot's
	// incident needs a person, for this reason.
	page string
	// note: quiet users (a baseline problem); unjudged: the history could
	// not be read.
	note     string
	unjudged bool
}

// judgedRoute is what verdict (with why) makes of the route silence s at
// now. acted: the bot's open incident is this route's silence, already
// acted on (resubscribed once). Anything but a close refutes the route's
// silence for its threshold: no alarm for it before now + threshold,
// unless it speaks meanwhile.
func (w *watch) judgedRoute(now time.Time, s suspicion, verdict silenceVerdict, why string, acted bool) routeJudgment {
	if verdict == deaf && !acted {
		return routeJudgment{close: &closeCause{signal: incident.SignalRouteSilence, route: s.route, reason: s.reason + "; " + why, dropped: s.heardAt.UTC()}}
	}
	w.routeRefuted[s.route] = now.Add(s.threshold)
	switch verdict {
	case unknown:
		return routeJudgment{unjudged: true}
	case quiet:
		return routeJudgment{note: fmt.Sprintf("%s, but %s: a baseline problem, not an incident", s.reason, why)}
	}
	return routeJudgment{page: s.reason + "; " + why + "; a resubscribe on a fresh connection did not bring it back"}
}

// probeVerdict is what a probe's answer makes of a suspicion.
type probeVerdict struct {
	// close: the link is dead; close the connection as unhealthy with
	// this cause (the monitor ends).
	close *closeCause
	// late: a late heartbeat ack, but the probe was acked: a slow moment.
	late bool
	// judge: a silence with the link up: the history or the outbound
	// signal decides (judgeSilence, then judged).
	judge bool
	// degrade: frames fail but the link answers: write the record
	// degraded for this reason ("": it says so already).
	degrade string
}

// probed is what the probe asked for s says: err nil is an ack.
func (w *watch) probed(s suspicion, err error) probeVerdict {
	switch {
	case err != nil:
		// The link is dead, whatever raised the suspicion. A silence
		// incident means a deaf connection (probes answered, callbacks
		// missing) and recovers only when callbacks arrive again; a dead
		// link recovers when a new connection subscribes, as any dropped
		// one does (an idle bot may get no callback for hours).
		signal := s.signal
		if signal == incident.SignalSilence {
			signal = incident.SignalProbe
		}
		return probeVerdict{close: &closeCause{signal: signal, reason: s.reason + "; probe not acked: " + err.Error(), dropped: s.evidence}}
	case s.signal == incident.SignalProbe:
		return probeVerdict{late: true}
	case s.signal == incident.SignalSilence:
		return probeVerdict{judge: true}
	case w.degraded != s.reason:
		w.degraded = s.reason
		return probeVerdict{degrade: s.reason}
	}
	return probeVerdict{}
}

type silenceVerdict int

const (
	quiet   silenceVerdict = iota // the users are quiet
	deaf                          // the server no longer delivers to this connection
	unknown                       // cannot tell now (the history or the task store unreadable)
)

// missedSpan is what the history is asked about a silence: messages
// created since the last callback (a second before it) and until two
// seconds ago (those of the last seconds may be in the handlers still).
func (s suspicion) missedSpan(now time.Time) (since, until time.Time) {
	return s.heardAt.Add(-time.Second), now.Add(-2 * time.Second)
}

// judgeSilence cross-checks a silence the baseline finds suspicious (the
// probe was acked, so the link is up). missed and err are the history's
// answer (Backfiller.Missed over s.missedSpan; ErrNoHistory without a
// history source). The history, where there is one, decides: messages
// created since the last callback and never handled mean a deaf
// connection, none mean quiet users; a history that cannot be read
// judges nothing now (reconnecting WeCom would not mend it). Without a
// history, the outbound signal decides: a frame acked within refute says
// the connection works, so the silence is quiet users (a baseline
// problem); otherwise it is deaf.
func judgeSilence(now time.Time, refute time.Duration, v wecom.Vitals, missed int, err error) (silenceVerdict, string) {
	switch {
	case err == nil && missed > 0:
		return deaf, fmt.Sprintf("the history has %d message(s) since then that never arrived: the server no longer delivers to this connection", missed)
	case err == nil:
		return quiet, "the history has no message since then: the users are quiet"
	case !errors.Is(err, ErrNoHistory):
		return unknown, "the history could not be checked (" + err.Error() + "): not judged now"
	}
	if !v.LastAckOK.IsZero() && now.Sub(v.LastAckOK) < refute {
		return quiet, fmt.Sprintf("a frame was acked %s ago and the probe was acked", now.Sub(v.LastAckOK).Round(time.Second))
	}
	return deaf, "the probe was acked and no frame was acked recently: the server no longer delivers to this connection"
}

// judgment is what a judged silence comes to.
type judgment struct {
	// close: a deaf connection not yet reconnected for this incident:
	// close it (the monitor ends), the silence dating from its last
	// callback.
	close *closeCause
	// note: quiet users: a baseline problem, for the record's
	// BaselineNote. unjudged: the history could not be read.
	note     string
	unjudged bool
}

// judged is what verdict (with why) makes of the silence s at now. acted:
// the bot's open incident is a silence already acted on (reconnected
// once), read for a deaf verdict only. Anything but a close refutes the
// silence for its threshold: no alarm before now + threshold, unless
// callbacks arrive meanwhile.
func (w *watch) judged(now time.Time, s suspicion, verdict silenceVerdict, why string, acted bool) judgment {
	if verdict == deaf && !acted {
		return judgment{close: &closeCause{signal: incident.SignalSilence, reason: s.reason + "; " + why, dropped: s.heardAt.UTC()}}
	}
	w.refutedUntil = now.Add(s.threshold)
	switch verdict {
	case unknown:
		return judgment{unjudged: true}
	case quiet:
		return judgment{note: fmt.Sprintf("%s, but %s: a baseline problem, not an incident", s.reason, why)}
	}
	return judgment{} // reconnected once for this incident already: wait for traffic
}

// settlement is what a tick writes once its suspicion (if any) is settled.
type settlement struct {
	// online: frames are acked again: the record is no longer degraded.
	online bool
	// flush: write the connection's timestamps into the record.
	flush bool
	// save: save the baseline.
	save bool
}

// settle is the end of a tick at now: a degraded record is cleared once
// the latest frame was acked, the timestamps are written every
// RecordInterval and the baseline saved every SaveEvery (both only once
// JetStream is bound; the baseline only if it is the saved one).
func (w *watch) settle(now time.Time, s sight) settlement {
	var st settlement
	v := s.v
	if w.degraded != "" && v.FailedInARow == 0 && v.LastAckOK.After(v.LastAckFail) {
		w.degraded = ""
		st.online = s.bound
	}
	if s.bound && now.Sub(w.lastFlush) >= w.rules.RecordInterval {
		w.lastFlush, st.flush = now, true
	}
	if s.bound && s.loaded && now.Sub(w.lastSave) >= w.rules.SaveEvery {
		w.lastSave, st.save = now, true
	}
	return st
}

// takeover is the incident a leader finds as it dials bot at now, from the
// bot's record (when no outage incident is open): a holder whose record
// still says it is connected, without a handover, vanished without a word
// (a crash, kill -9, a hang or a partition): down since the record's last
// evidence (its last write, if it has none); a handover that no node took
// over for longer than threshold is an outage since the handover. nil:
// neither.
func takeover(now time.Time, bot string, rec Record, threshold time.Duration, node string, term int64) *incident.Incident {
	switch {
	case (rec.State == Online || rec.State == Degraded || rec.State == HalfOpen) && !rec.Handover:
		dropped := rec.LastEvidence()
		if dropped.IsZero() {
			dropped = rec.Updated
		}
		return &incident.Incident{Bot: bot, Signal: incident.SignalTakeover, Level: incident.Auto,
			Reason: fmt.Sprintf("node %s (term %d) stopped holding the bot without a word (a crash, kill -9, a hang or a partition); node %s took over",
				rec.Node, rec.TermRev, node),
			Dropped: dropped, Detected: now, TermRev: term}
	case rec.Handover && now.Sub(rec.Since) > threshold:
		return &incident.Incident{Bot: bot, Signal: incident.SignalTakeover, Level: incident.Auto,
			Reason:  fmt.Sprintf("no node held the bot for %s after node %s handed it over", now.Sub(rec.Since).Round(time.Second), rec.Node),
			Dropped: rec.Since, Detected: now, TermRev: term}
	}
	return nil
}

// halfOpenAfter: a bot back at now after an outage since dropped goes
// half-open when the outage lasted at least threshold
// (Recovery.Threshold); a shorter one is online at once.
func halfOpenAfter(dropped, now time.Time, threshold time.Duration) bool {
	return now.Sub(dropped) >= threshold
}
