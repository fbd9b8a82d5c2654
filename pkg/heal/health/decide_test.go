package health

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/wecom"
)

// The monitor's decisions, one synchronous step each, at explicit times:
// no connection, no store, no clock.

// t0 is a connection's subscribe: a Monday, 09:00 UTC.
var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const ms = time.Millisecond

var rules = watchRules{ProbeEvery: 5 * time.Second, RecordInterval: 5 * time.Second, SaveEvery: time.Minute,
	Refute: 10 * time.Second, Location: time.UTC,
	Limits: BaselineLimits{Factor: 7, Floor: 2 * time.Second, MinWatched: time.Minute, MinEvents: 20}}

// busy is a baseline of t0's hour so busy (100 callbacks a second) that
// the silence it allows is the floor, 2 s, whatever a tick adds to it.
func busy() Baseline {
	var b Baseline
	b.Observe(t0, time.UTC, 10*time.Minute, 60000)
	return b
}

// fresh is what a connection's vitals say just after it subscribed.
func fresh() wecom.Vitals { return wecom.Vitals{Connected: t0, LastPingAck: t0} }

func TestDecide(t *testing.T) {
	type want struct {
		heard  bool
		learn  *learning // nil: nothing learnt
		signal string    // "": no probe
		reason string    // in the probe's reason
	}
	cases := []struct {
		name  string
		now   time.Time
		watch func(*watch)
		sight func(*sight)
		want  want
	}{
		{name: "healthy and quiet: the baseline learns the tick, nothing is suspected",
			now: at(time.Second), want: want{learn: &learning{dt: time.Second}}},
		{name: "what the baseline learns: the tick's span, callbacks and acks since the last tick",
			now:   at(3 * time.Second),
			watch: func(w *watch) { w.last, w.seenCallbacks, w.seenOK = at(time.Second), 3, 1 },
			sight: func(s *sight) { s.v.Callbacks, s.v.AckedOK, s.v.LastCallback = 5, 4, at(2*time.Second) },
			want:  want{learn: &learning{dt: 2 * time.Second, events: 2, sends: 3}}},

		// TestDeadLinkIsFoundByAProbe, TestBlackholedLinkIsFoundByAProbe:
		// the tick that sees a frame fail probes, without waiting
		// ProbeEvery after the subscribe.
		{name: "a frame unanswered: probed at the first tick that sees it",
			now:   at(100 * ms),
			sight: func(s *sight) { s.v.Unanswered, s.v.LastAckFail, s.v.FailedInARow = 1, at(50*ms), 1 },
			want:  want{signal: incident.SignalOutbound, reason: "a frame went unanswered (1 on this connection)"}},
		{name: "a frame unanswered and seen already: no new suspicion",
			now:   at(10 * time.Second),
			watch: func(w *watch) { w.seenUnanswered, w.lastProbe = 1, at(time.Second) },
			sight: func(s *sight) { s.v.Unanswered = 1 },
			want:  want{learn: &learning{dt: 10 * time.Second}}},
		{name: "frames refused since the last probe: probed; not learnt from",
			now:   at(10 * time.Second),
			watch: func(w *watch) { w.lastProbe = at(time.Second) },
			sight: func(s *sight) { s.v.FailedInARow, s.v.LastAckFail = 2, at(9*time.Second) },
			want:  want{signal: incident.SignalOutbound, reason: "2 frames refused in a row"}},
		{name: "frames refused before the last probe: no new suspicion",
			now:   at(10 * time.Second),
			watch: func(w *watch) { w.lastProbe = at(time.Second) },
			sight: func(s *sight) { s.v.FailedInARow, s.v.LastAckFail = 2, at(500*ms) }},

		// TestBlackholedIdleBotIsFoundByALateHeartbeat: the first late
		// heartbeat ack is probed at once, once per heartbeat.
		{name: "a late heartbeat: probed at once",
			now:   at(2 * time.Second),
			sight: func(s *sight) { s.v.PingLate, s.v.LastPing = true, at(time.Second) },
			want:  want{learn: &learning{dt: 2 * time.Second}, signal: incident.SignalProbe, reason: "the heartbeat sent 1s ago is not acked"}},
		{name: "a late heartbeat probed already: no new suspicion",
			now:   at(10 * time.Second),
			watch: func(w *watch) { w.lastProbe = at(1500 * ms) },
			sight: func(s *sight) { s.v.PingLate, s.v.LastPing = true, at(time.Second) },
			want:  want{learn: &learning{dt: 10 * time.Second}}},

		// TestBlackholedIdleBotIsFoundBySilence, TestSilentConnectionIsReplacedOnce:
		// a silence is suspected as soon as it is longer than the baseline
		// allows (2 s here), not at it.
		{name: "a silence as long as the baseline allows: not suspected",
			now:   at(2 * time.Second),
			sight: func(s *sight) { s.baseline = busy() },
			want:  want{learn: &learning{dt: 2 * time.Second}}},
		{name: "a silence longer than the baseline allows: probed",
			now:   at(2*time.Second + ms),
			sight: func(s *sight) { s.baseline = busy() },
			want:  want{learn: &learning{dt: 2*time.Second + ms}, signal: incident.SignalSilence, reason: "no callback for 2s (the baseline allows 2s at this hour)"}},
		{name: "a silence counts from the last callback",
			now:   at(7 * time.Second),
			watch: func(w *watch) { w.last, w.seenCallbacks = at(6*time.Second), 1 },
			sight: func(s *sight) { s.baseline, s.v.Callbacks, s.v.LastCallback = busy(), 1, at(5*time.Second) },
			want:  want{learn: &learning{dt: time.Second}}},
		{name: "a baseline without an opinion: no silence alarm, however long",
			now:  at(time.Hour),
			want: want{learn: &learning{dt: time.Hour}}},
		{name: "a judged silence: no alarm until refutedUntil",
			now:   at(10 * time.Second),
			watch: func(w *watch) { w.last, w.refutedUntil = at(9*time.Second), at(10*time.Second) },
			sight: func(s *sight) { s.baseline = busy() },
			want:  want{learn: &learning{dt: time.Second}}},
		{name: "a judged silence: alarm again once refutedUntil is past",
			now:   at(10*time.Second + ms),
			watch: func(w *watch) { w.last, w.refutedUntil = at(10*time.Second), at(10*time.Second) },
			sight: func(s *sight) { s.baseline = busy() },
			want:  want{learn: &learning{dt: ms}, signal: incident.SignalSilence, reason: "no callback for 10s"}},
		{name: "a callback ends a refutation: the next silence is judged afresh",
			now:   at(4 * time.Second),
			watch: func(w *watch) { w.last, w.refutedUntil = at(3*time.Second), at(time.Hour) },
			sight: func(s *sight) { s.baseline, s.v.Callbacks, s.v.LastCallback = busy(), 1, at(time.Second) },
			want:  want{learn: &learning{dt: time.Second, events: 1}, signal: incident.SignalSilence, reason: "no callback for 3s"}},

		{name: "the most specific suspicion first: an unanswered frame over refusals, a late heartbeat and a silence",
			now: at(time.Minute),
			sight: func(s *sight) {
				s.baseline = busy()
				s.v.Unanswered, s.v.FailedInARow, s.v.LastAckFail, s.v.PingLate, s.v.LastPing = 1, 1, at(50*time.Second), true, at(50*time.Second)
			},
			want: want{signal: incident.SignalOutbound, reason: "unanswered"}},
		{name: "refusals over a late heartbeat",
			now: at(time.Minute),
			sight: func(s *sight) {
				s.v.FailedInARow, s.v.LastAckFail, s.v.PingLate, s.v.LastPing = 3, at(50*time.Second), true, at(50*time.Second)
			},
			want: want{signal: incident.SignalOutbound, reason: "3 frames refused"}},
		{name: "a late heartbeat over a silence",
			now:   at(time.Minute),
			sight: func(s *sight) { s.baseline, s.v.PingLate, s.v.LastPing = busy(), true, at(50*time.Second) },
			want:  want{learn: &learning{dt: time.Minute}, signal: incident.SignalProbe, reason: "heartbeat sent 10s ago"}},

		{name: "a suspicion within ProbeEvery of the last probe: not probed",
			now:   at(time.Second + 5*time.Second - ms),
			watch: func(w *watch) { w.last, w.lastProbe = at(time.Second), at(time.Second) },
			sight: func(s *sight) { s.v.FailedInARow, s.v.LastAckFail = 1, at(5*time.Second) }},
		{name: "a suspicion ProbeEvery after the last probe: probed",
			now:   at(time.Second + 5*time.Second),
			watch: func(w *watch) { w.last, w.lastProbe = at(time.Second), at(time.Second) },
			sight: func(s *sight) { s.v.FailedInARow, s.v.LastAckFail = 1, at(5*time.Second) },
			want:  want{signal: incident.SignalOutbound, reason: "1 frames refused in a row"}},

		// TestSilentConnectionIsReplacedOnce, TestSilenceRecoveredOnAnotherNode.
		{name: "callbacks on a connection while a silence waits: heard, and learnt from",
			now:   at(time.Second),
			sight: func(s *sight) { s.silent, s.v.Callbacks, s.v.LastCallback = true, 2, at(500*ms) },
			want:  want{heard: true, learn: &learning{dt: time.Second, events: 2}}},
		{name: "no callback while a silence waits: not heard, not learnt from",
			now:   at(time.Second),
			sight: func(s *sight) { s.silent = true }},
		{name: "degraded: not learnt from",
			now:   at(time.Second),
			watch: func(w *watch) { w.degraded = "1 frames refused in a row" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWatch(rules, t0)
			if c.watch != nil {
				c.watch(w)
			}
			s := sight{v: fresh(), bound: true, loaded: true}
			if c.sight != nil {
				c.sight(&s)
			}
			before := *w
			p := w.decide(c.now, s)
			if p.heard != c.want.heard {
				t.Errorf("heard = %v, want %v", p.heard, c.want.heard)
			}
			if fmt.Sprint(p.learn) != fmt.Sprint(c.want.learn) {
				t.Errorf("learn = %+v, want %+v", p.learn, c.want.learn)
			}
			if w.last != c.now {
				t.Errorf("last tick %v, want now", w.last)
			}
			if c.want.signal == "" {
				if p.probe != nil {
					t.Fatalf("probe %+v, want none", *p.probe)
				}
				if w.lastProbe != before.lastProbe {
					t.Errorf("lastProbe moved to %v without a probe", w.lastProbe)
				}
				return
			}
			if p.probe == nil {
				t.Fatalf("no probe, want one for %s %q", c.want.signal, c.want.reason)
			}
			if p.probe.signal != c.want.signal || !strings.Contains(p.probe.reason, c.want.reason) {
				t.Errorf("probe for %s %q, want %s %q", p.probe.signal, p.probe.reason, c.want.signal, c.want.reason)
			}
			if w.lastProbe != c.now {
				t.Errorf("lastProbe %v, want now", w.lastProbe)
			}
			if p.probe.evidence != s.v.LastEvidence() {
				t.Errorf("evidence %v, want the vitals' %v", p.probe.evidence, s.v.LastEvidence())
			}
		})
	}
}

// A silence probe carries what its judgment needs: since when the
// connection heard nothing, and what the baseline allowed.
func TestDecideSilenceSuspicion(t *testing.T) {
	w := newWatch(rules, t0)
	w.seenCallbacks = 1
	s := sight{v: fresh(), baseline: busy()}
	s.v.Callbacks, s.v.LastCallback = 1, at(5*time.Second)
	p := w.decide(at(7*time.Second+ms), s)
	if p.probe == nil || p.probe.signal != incident.SignalSilence {
		t.Fatalf("plan %+v, want a silence probe", p)
	}
	if p.probe.heardAt != at(5*time.Second) || p.probe.threshold != 2*time.Second {
		t.Fatalf("silence heard at %v allowing %s, want %v allowing 2s", p.probe.heardAt, p.probe.threshold, at(5*time.Second))
	}
}

// Probes that a lasting suspicion asks for are ProbeEvery apart, the first
// at once (ticks every second, a frame refused at each).
func TestProbesAreProbeEveryApart(t *testing.T) {
	w := newWatch(rules, t0)
	var probed []time.Duration
	for sec := 1; sec <= 12; sec++ {
		now := at(time.Duration(sec) * time.Second)
		s := sight{v: fresh()}
		s.v.FailedInARow, s.v.LastAckFail = int64(sec), now.Add(-100*ms)
		if p := w.decide(now, s); p.probe != nil {
			probed = append(probed, now.Sub(t0))
		}
	}
	if fmt.Sprint(probed) != "[1s 6s 11s]" {
		t.Fatalf("probed at %v, want [1s 6s 11s]", probed)
	}
}

// A lost unanswered frame stays lost: counted when seen, even when the
// probe it asks for is not due (another suspicion is being probed).
func TestUnansweredSeenOnce(t *testing.T) {
	w := newWatch(rules, t0)
	w.lastProbe = at(time.Second)
	s := sight{v: fresh()}
	s.v.Unanswered = 1
	if p := w.decide(at(2*time.Second), s); p.probe != nil || w.seenUnanswered != 1 {
		t.Fatalf("probe %v, seen %d: want none (not due), seen 1", p.probe, w.seenUnanswered)
	}
	if p := w.decide(at(6*time.Second), s); p.probe != nil {
		t.Fatalf("the same unanswered frame probed again: %+v", *p.probe)
	}
}

// show prints a verdict or a judgment with its close cause, if any.
func show(x any) string {
	switch x := x.(type) {
	case probeVerdict:
		return fmt.Sprintf("{late %v judge %v degrade %q close %s}", x.late, x.judge, x.degrade, showClose(x.close))
	case judgment:
		return fmt.Sprintf("{note %q unjudged %v close %s}", x.note, x.unjudged, showClose(x.close))
	}
	return fmt.Sprint(x)
}

func showClose(c *closeCause) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("%+v", *c)
}

func TestProbed(t *testing.T) {
	evidence := at(3 * time.Second)
	sp := func(signal, reason string) suspicion {
		return suspicion{signal: signal, reason: reason, heardAt: at(time.Second), threshold: 2 * time.Second, evidence: evidence}
	}
	down := errors.New("probe: ack timeout")
	cases := []struct {
		name     string
		degraded string
		s        suspicion
		err      error
		want     probeVerdict
		degrades string // w.degraded after
	}{
		{name: "frames fail, the probe too: a dead link, dating from the last evidence",
			s: sp(incident.SignalOutbound, "2 frames refused in a row"), err: down,
			want: probeVerdict{close: &closeCause{signal: incident.SignalOutbound, reason: "2 frames refused in a row; probe not acked: probe: ack timeout", dropped: evidence}}},
		{name: "a late heartbeat, the probe too: a dead link",
			s: sp(incident.SignalProbe, "the heartbeat sent 1s ago is not acked"), err: down,
			want: probeVerdict{close: &closeCause{signal: incident.SignalProbe, reason: "the heartbeat sent 1s ago is not acked; probe not acked: probe: ack timeout", dropped: evidence}}},
		{name: "a silence, the probe not acked: a dead link (signal probe), not a deaf connection",
			s: sp(incident.SignalSilence, "no callback for 3s"), err: down,
			want: probeVerdict{close: &closeCause{signal: incident.SignalProbe, reason: "no callback for 3s; probe not acked: probe: ack timeout", dropped: evidence}}},
		{name: "a late heartbeat, the probe acked: a slow moment",
			s: sp(incident.SignalProbe, "late"), want: probeVerdict{late: true}},
		{name: "a silence, the probe acked: judged",
			s: sp(incident.SignalSilence, "no callback for 3s"), want: probeVerdict{judge: true}},
		{name: "frames fail, the probe acked: degraded",
			s: sp(incident.SignalOutbound, "2 frames refused in a row"), want: probeVerdict{degrade: "2 frames refused in a row"}, degrades: "2 frames refused in a row"},
		{name: "degraded for that reason already: nothing to write",
			degraded: "2 frames refused in a row", s: sp(incident.SignalOutbound, "2 frames refused in a row"), degrades: "2 frames refused in a row"},
		{name: "degraded for another reason: written",
			degraded: "1 frames refused in a row", s: sp(incident.SignalOutbound, "a frame went unanswered (1 on this connection)"),
			want: probeVerdict{degrade: "a frame went unanswered (1 on this connection)"}, degrades: "a frame went unanswered (1 on this connection)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWatch(rules, t0)
			w.degraded = c.degraded
			got := w.probed(c.s, c.err)
			if show(got) != show(c.want) {
				t.Errorf("verdict %s, want %s", show(got), show(c.want))
			}
			if w.degraded != c.degrades {
				t.Errorf("degraded %q, want %q", w.degraded, c.degrades)
			}
		})
	}
}

// TestSilenceRefutedByARecentOutboundSuccess and TestHistoryDecidesASilence,
// as decisions: the history decides where there is one; without one, a
// frame acked less than Refute ago makes the silence quiet users.
func TestJudgeSilence(t *testing.T) {
	now := at(time.Minute)
	refute := 10 * time.Second
	acked := func(ago time.Duration) wecom.Vitals { v := fresh(); v.LastAckOK = now.Add(-ago); return v }
	cases := []struct {
		name   string
		v      wecom.Vitals
		missed int
		err    error
		want   silenceVerdict
		why    string
	}{
		{name: "no history, a frame acked just within Refute: quiet", v: acked(refute - ms), err: ErrNoHistory, want: quiet, why: "a frame was acked 10s ago"},
		{name: "no history, a frame acked Refute ago: deaf", v: acked(refute), err: ErrNoHistory, want: deaf, why: "no frame was acked recently"},
		{name: "no history, no frame ever acked: deaf", v: fresh(), err: ErrNoHistory, want: deaf},
		{name: "no history (wrapped): the outbound signal decides", v: acked(time.Second), err: fmt.Errorf("pass: %w", ErrNoHistory), want: quiet},
		{name: "missed messages: deaf, even with a frame acked a second ago", v: acked(time.Second), missed: 3, want: deaf, why: "3 message(s) since then that never arrived"},
		{name: "an empty history: quiet, even with nothing acked", v: fresh(), want: quiet, why: "the users are quiet"},
		{name: "an unreadable history: not judged", v: acked(time.Second), err: errors.New("task bucket: nats: timeout"), want: unknown, why: "nats: timeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, why := judgeSilence(now, refute, c.v, c.missed, c.err)
			if got != c.want || !strings.Contains(why, c.why) {
				t.Errorf("verdict %d %q, want %d with %q", got, why, c.want, c.why)
			}
		})
	}
}

// The history is asked from a second before the last callback to two
// seconds before now.
func TestMissedSpan(t *testing.T) {
	s := suspicion{heardAt: at(5 * time.Second)}
	since, until := s.missedSpan(at(20 * time.Second))
	if since != at(4*time.Second) || until != at(18*time.Second) {
		t.Fatalf("span [%v, %v), want [t0+4s, t0+18s)", since, until)
	}
}

func TestJudged(t *testing.T) {
	now := at(time.Minute)
	s := suspicion{signal: incident.SignalSilence, reason: "no callback for 3s (the baseline allows 2s at this hour)",
		heardAt: at(57 * time.Second), threshold: 2 * time.Second}
	cases := []struct {
		name    string
		verdict silenceVerdict
		acted   bool
		want    judgment
		refuted time.Time
	}{
		{name: "deaf: closed, the silence dating from the last callback", verdict: deaf,
			want: judgment{close: &closeCause{signal: incident.SignalSilence, reason: s.reason + "; why", dropped: s.heardAt}}},
		{name: "deaf, reconnected once for this incident already: wait for traffic, no alarm for a threshold", verdict: deaf, acted: true,
			refuted: now.Add(2 * time.Second)},
		{name: "quiet users: a baseline note, no alarm for a threshold", verdict: quiet,
			want: judgment{note: s.reason + ", but why: a baseline problem, not an incident"}, refuted: now.Add(2 * time.Second)},
		{name: "not judged: no alarm for a threshold", verdict: unknown, want: judgment{unjudged: true}, refuted: now.Add(2 * time.Second)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWatch(rules, t0)
			got := w.judged(now, s, c.verdict, "why", c.acted)
			if show(got) != show(c.want) {
				t.Errorf("judgment %s, want %s", show(got), show(c.want))
			}
			if w.refutedUntil != c.refuted {
				t.Errorf("refuted until %v, want %v", w.refutedUntil, c.refuted)
			}
		})
	}
}

// TestSilenceRefutedByARecentOutboundSuccess, its timing: a silence
// refuted at 3 s (threshold 2 s) raises no alarm until 5 s, and is probed
// again only ProbeEvery after the first probe, at 8 s.
func TestSilenceRefutedOncePerThreshold(t *testing.T) {
	w := newWatch(rules, t0)
	tick := func(sec time.Duration) *suspicion {
		s := sight{v: fresh(), baseline: busy()}
		s.v.LastAckOK = at(sec - time.Second)
		return w.decide(at(sec), s).probe
	}
	sp := tick(3 * time.Second)
	if sp == nil || sp.signal != incident.SignalSilence {
		t.Fatalf("no silence probe at 3s: %+v", sp)
	}
	if pv := w.probed(*sp, nil); !pv.judge {
		t.Fatalf("an acked probe of a silence: %+v, want judged", pv)
	}
	verdict, why := judgeSilence(at(3*time.Second), rules.Refute, wecom.Vitals{LastAckOK: at(2 * time.Second)}, 0, ErrNoHistory)
	if j := w.judged(at(3*time.Second), *sp, verdict, why, false); j.note == "" || j.close != nil {
		t.Fatalf("judgment %+v, want a baseline note", j)
	}
	for sec := 4; sec <= 12; sec++ {
		p := tick(time.Duration(sec) * time.Second)
		if want := sec == 8; (p != nil) != want {
			t.Fatalf("at %ds: probe %v, want %v", sec, p != nil, want)
		}
	}
}

func TestSettle(t *testing.T) {
	ok := func(v *wecom.Vitals) { v.LastAckFail, v.LastAckOK = at(time.Second), at(2*time.Second) }
	cases := []struct {
		name     string
		now      time.Time
		degraded string
		unbound  bool
		unloaded bool
		vitals   func(*wecom.Vitals)
		want     settlement
		degrades string
	}{
		{name: "within RecordInterval of the start: nothing to write", now: at(5*time.Second - ms)},
		{name: "RecordInterval after the start: the timestamps are written", now: at(5 * time.Second), want: settlement{flush: true}},
		{name: "unbound: nothing is written", now: at(time.Hour), unbound: true},
		{name: "a minute after the start: the baseline is saved too", now: at(time.Minute), want: settlement{flush: true, save: true}},
		{name: "a baseline not loaded from the bucket is never saved", now: at(time.Minute), unloaded: true, want: settlement{flush: true}},
		{name: "degraded, the latest frame acked: online again", now: at(3 * time.Second), degraded: "x", vitals: ok, want: settlement{online: true}},
		{name: "degraded, the latest frame refused: still degraded", now: at(3 * time.Second), degraded: "x", degrades: "x",
			vitals: func(v *wecom.Vitals) { v.LastAckOK, v.LastAckFail = at(time.Second), at(2*time.Second) }},
		{name: "degraded, frames failing in a row: still degraded", now: at(3 * time.Second), degraded: "x", degrades: "x",
			vitals: func(v *wecom.Vitals) { ok(v); v.FailedInARow = 1 }},
		{name: "degraded and unbound: cleared, nothing to write", now: at(3 * time.Second), degraded: "x", unbound: true, vitals: ok},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWatch(rules, t0)
			w.degraded = c.degraded
			s := sight{v: fresh(), bound: !c.unbound, loaded: !c.unloaded}
			if c.vitals != nil {
				c.vitals(&s.v)
			}
			if got := w.settle(c.now, s); got != c.want {
				t.Errorf("settle = %+v, want %+v", got, c.want)
			}
			if w.degraded != c.degrades {
				t.Errorf("degraded %q, want %q", w.degraded, c.degrades)
			}
		})
	}
}

// The record's timestamps are written every RecordInterval (ticks every
// second, 5 s interval), the baseline every minute.
func TestRecordEveryRecordInterval(t *testing.T) {
	w := newWatch(rules, t0)
	var flushed, saved []time.Duration
	for sec := 1; sec <= 125; sec++ {
		now := at(time.Duration(sec) * time.Second)
		st := w.settle(now, sight{v: fresh(), bound: true, loaded: true})
		if st.flush {
			flushed = append(flushed, now.Sub(t0))
		}
		if st.save {
			saved = append(saved, now.Sub(t0))
		}
	}
	if len(flushed) != 25 || flushed[0] != 5*time.Second || flushed[1] != 10*time.Second {
		t.Fatalf("flushed at %v, want every 5s", flushed)
	}
	if fmt.Sprint(saved) != "[1m0s 2m0s]" {
		t.Fatalf("saved at %v, want [1m0s 2m0s]", saved)
	}
}

// TestDropIsOneIncidentClosedAutomatically, its timing: an end the
// connection saw happen is its own detection (dropped is now, T1 zero);
// an end inferred from missing acks dates back to the last evidence, and
// one the monitor closed, to what the monitor knew.
func TestClassify(t *testing.T) {
	now := at(time.Minute)
	v := fresh()
	v.LastAckOK = at(40 * time.Second)
	cause := &closeCause{signal: incident.SignalSilence, reason: "no callback for 9s; deaf", dropped: at(30 * time.Second)}
	cases := []struct {
		name    string
		reason  wecom.CloseReason
		err     error
		termErr error
		cause   *closeCause
		signal  string
		why     string
		dropped time.Time
	}{
		{name: "a drop (network): now", reason: wecom.ReasonNetwork, err: errors.New("EOF"), signal: incident.SignalConnection, why: "EOF", dropped: now},
		{name: "kicked: now", reason: wecom.ReasonKicked, signal: incident.SignalConnection, why: "kicked", dropped: now},
		{name: "leadership lost: now", reason: wecom.ReasonClosedByUs, termErr: errors.New("lease expired"), signal: incident.SignalConnection, why: "leadership lost: lease expired", dropped: now},
		{name: "heartbeats unacked: the last evidence", reason: wecom.ReasonHeartbeatLost, err: errors.New("2 missed"), signal: incident.SignalProbe, why: "heartbeats unacked: 2 missed", dropped: at(40 * time.Second)},
		{name: "frames unacked: the last evidence", reason: wecom.ReasonAckTimeouts, err: errors.New("3 timeouts"), signal: incident.SignalOutbound, why: "frames unacked: 3 timeouts", dropped: at(40 * time.Second)},
		{name: "closed by the monitor: its cause", reason: wecom.ReasonUnhealthy, cause: cause, signal: incident.SignalSilence, why: cause.reason, dropped: at(30 * time.Second)},
		{name: "closed as unhealthy without a cause: the last evidence", reason: wecom.ReasonUnhealthy, err: errors.New("half-open: probe failed"), signal: incident.SignalProbe, why: "half-open", dropped: at(40 * time.Second)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			signal, why, dropped := classify(c.reason, c.err, c.termErr, v, c.cause, now)
			if signal != c.signal || !strings.Contains(why, c.why) || !dropped.Equal(c.dropped) {
				t.Errorf("classify = %s %q %v, want %s %q %v", signal, why, dropped, c.signal, c.why, c.dropped)
			}
		})
	}
}

// TestTakeoverOfAVanishedLeaderIsAnIncident and
// TestGracefulHandoverIsNotAnIncident, as decisions: a record left online
// is an outage since its last evidence; a handover is none unless nobody
// took over within the threshold.
func TestTakeover(t *testing.T) {
	now := at(time.Minute)
	threshold := 30 * time.Second
	online := Record{Bot: "b1", State: Online, Node: "ghost", TermRev: 7, Since: at(0),
		LastProbeOK: now.Add(-4 * time.Second), LastInbound: now.Add(-9 * time.Second), Updated: now.Add(-3 * time.Second)}
	cases := []struct {
		name    string
		rec     func(*Record)
		dropped time.Time // zero: no incident
		reason  string
	}{
		{name: "left online: down since its last evidence", dropped: now.Add(-4 * time.Second), reason: "node ghost (term 7) stopped holding the bot without a word"},
		{name: "left degraded: the same", rec: func(r *Record) { r.State = Degraded }, dropped: now.Add(-4 * time.Second)},
		{name: "left half-open: the same", rec: func(r *Record) { r.State = HalfOpen }, dropped: now.Add(-4 * time.Second)},
		{name: "left online without evidence: since its last write",
			rec: func(r *Record) { r.LastProbeOK, r.LastInbound = time.Time{}, time.Time{} }, dropped: now.Add(-3 * time.Second)},
		{name: "offline (its end recorded): none", rec: func(r *Record) { r.State = Offline }},
		{name: "a bot never seen: none", rec: func(r *Record) { *r = Record{Bot: "b1"} }},
		{name: "a handover just now: none", rec: func(r *Record) { r.State, r.Handover, r.Since = Offline, true, now.Add(-time.Second) }},
		{name: "a handover taken over exactly at the threshold: none",
			rec: func(r *Record) { r.State, r.Handover, r.Since = Offline, true, now.Add(-threshold) }},
		{name: "a handover nobody took over for longer than the threshold: down since the handover",
			rec:     func(r *Record) { r.State, r.Handover, r.Since = Offline, true, now.Add(-threshold-ms) },
			dropped: now.Add(-threshold - ms), reason: "no node held the bot for 30s after node ghost handed it over"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := online
			if c.rec != nil {
				c.rec(&rec)
			}
			inc := takeover(now, "b1", rec, threshold, "n2", 8)
			if c.dropped.IsZero() {
				if inc != nil {
					t.Fatalf("incident %+v, want none", *inc)
				}
				return
			}
			if inc == nil {
				t.Fatal("no incident")
			}
			if inc.Signal != incident.SignalTakeover || inc.Bot != "b1" || inc.TermRev != 8 || !inc.Detected.Equal(now) ||
				!inc.Dropped.Equal(c.dropped) || !strings.Contains(inc.Reason, c.reason) {
				t.Fatalf("incident %+v, want takeover dropped %v (%q)", *inc, c.dropped, c.reason)
			}
		})
	}
}

// TestHalfOpenAfterALongOutage and TestLongSilenceGoesHalfOpen, their
// threshold: an outage of at least Recovery.Threshold goes half-open.
func TestHalfOpenAfter(t *testing.T) {
	threshold := 30 * time.Second
	for _, c := range []struct {
		down time.Duration
		want bool
	}{{0, false}, {threshold - ms, false}, {threshold, true}, {time.Hour, true}} {
		if got := halfOpenAfter(t0, t0.Add(c.down), threshold); got != c.want {
			t.Errorf("down %s: half-open %v, want %v", c.down, got, c.want)
		}
	}
}
