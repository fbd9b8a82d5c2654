package alert

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/heal/incident"
)

// A revoked secret pages a person at once, says nothing more while the
// incident stays open (not even after EscalateAfter: it is human already),
// and once when it recovers.
func TestRevokedSecretOneHumanAlertThenRecovery(t *testing.T) {
	f := newFixture(t)
	f.start(t, f.config(t))

	// The detector wrote level auto by mistake: the signal decides.
	inc := f.open(t, "b1", incident.SignalAuth, incident.Auto)
	a := f.rcv.expect(t, KindOpen, incident.Human)
	if len(a.Instances) != 1 || a.Instances[0].Bot != "b1" || a.Instances[0].Owner != "alice" || a.Instances[0].Incident != inc.ID {
		t.Fatalf("instances = %+v", a.Instances)
	}
	if !strings.Contains(a.NextAction, "secret") || a.ID != "open-"+inc.ID {
		t.Fatalf("alert = %+v", a)
	}

	// Still open: the detector adds to it, time passes beyond every limit.
	for k := range 3 {
		if _, err := f.store.Update(context.Background(), inc.Bot, inc.ID, func(i *incident.Incident) error {
			i.Note(f.clock.Now(), "n1", "auth refused again (%d)", k)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		f.clock.Add(5 * time.Minute)
	}
	f.barrier(t)

	f.recover(t, inc, false)
	r := f.rcv.expect(t, KindRecovered, incident.Human)
	if len(r.Instances) != 1 || r.Instances[0].Bot != "b1" || r.Instances[0].DowntimeSeconds < 15*60 {
		t.Fatalf("recovery = %+v", r)
	}
	f.recover(t, inc, true) // closing it later is no second recovery
	f.barrier(t)

	got := f.get(t, inc)
	if len(got.Alerts) != 2 || !got.Alerted("open") || !got.Alerted("recovered") {
		t.Fatalf("recorded alerts = %+v", got.Alerts)
	}
}

// Three bots down within the window: one merged alert, level human; a
// fourth after the window is alerted on its own, at level auto.
func TestOutagesWithinWindowMerge(t *testing.T) {
	f := newFixture(t)
	f.start(t, f.config(t))
	t0 := f.clock.Now()
	var incs []*incident.Incident
	for k, bot := range []string{"b1", "b2", "b3"} {
		f.clock.Set(t0.Add(time.Duration(k) * 10 * time.Second))
		incs = append(incs, f.open(t, bot, incident.SignalConnection, incident.Auto))
	}
	f.barrier(t) // the window is not over: nothing sent for them yet

	f.clock.Set(t0.Add(61 * time.Second))
	m := f.rcv.expect(t, KindMerged, incident.Human)
	if len(m.Instances) != 3 || m.CommonCause == "" || !strings.Contains(m.NextAction, "deploy") {
		t.Fatalf("merged = %+v", m)
	}
	for k, in := range m.Instances {
		if in.Bot != incs[k].Bot || in.Incident != incs[k].ID || in.Signal != incident.SignalConnection {
			t.Fatalf("instance %d = %+v", k, in)
		}
	}

	f.clock.Set(t0.Add(90 * time.Second))
	b4 := f.open(t, "b4", incident.SignalProbe, incident.Auto)
	f.clock.Set(t0.Add(151 * time.Second))
	o := f.rcv.expect(t, KindOpen, incident.Auto)
	if len(o.Instances) != 1 || o.Instances[0].Bot != "b4" || o.CommonCause != "" || o.Instances[0].Owner == "" {
		t.Fatalf("fourth = %+v", o)
	}
	f.barrier(t)
	if got := f.get(t, incs[1]); !got.Alerted("merged") || got.Alerted("open") {
		t.Fatalf("b2 alerts = %+v", got.Alerts)
	}
	if got := f.get(t, b4); !got.Alerted("open") {
		t.Fatalf("b4 alerts = %+v", got.Alerts)
	}

	// Still down after EscalateAfter: the merged bots escalate together
	// (b2 and b3 with b1, a few seconds early), b4 on its own later.
	f.clock.Set(t0.Add(DefaultEscalateAfter + time.Second))
	e := f.rcv.expect(t, KindEscalated, incident.Human)
	if len(e.Instances) != 3 || e.Instances[2].Bot != "b3" {
		t.Fatalf("escalated = %+v", e)
	}
	f.barrier(t)
	f.clock.Set(t0.Add(90*time.Second + DefaultEscalateAfter))
	if e := f.rcv.expect(t, KindEscalated, incident.Human); len(e.Instances) != 1 || e.Instances[0].Bot != "b4" {
		t.Fatalf("escalated = %+v", e)
	}
	f.barrier(t)
}

// A bot flapping 10 times in 2 minutes, each blip healed within seconds:
// no blip is alerted on its own (each healed before its merge window
// ended), and the flapping summary at the end of the flap window names
// the 9 after the first. Bound: per bot and flap window, at most one
// open, its recovery and one flapping summary (here the summary alone);
// each further window while it keeps flapping adds one summary.
func TestFlappingBotBoundedAlerts(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(t)
	f.start(t, cfg)
	t0 := f.clock.Now()
	flap := func(from time.Duration, n int) {
		for k := range n {
			f.clock.Set(t0.Add(from + time.Duration(k)*12*time.Second))
			inc := f.open(t, "flappy", incident.SignalConnection, incident.Auto)
			f.clock.Add(6 * time.Second)
			f.recover(t, inc, true)
		}
	}
	flap(0, 1)
	// Its recovery is seen before the clock passes its window's end
	// (else it would look like an outage still down then).
	f.barrier(t)
	flap(12*time.Second, 9) // 12 s … 114 s
	// Every recovery is seen before the clock jumps, and nothing was sent
	// for the blips: the barrier's alert is the next one.
	f.barrier(t)

	f.clock.Set(t0.Add(DefaultFlapWindow + time.Minute))
	s := f.rcv.expect(t, KindFlapping, incident.Human) // flapping for longer than EscalateAfter
	if len(s.Instances) != 9 || !strings.Contains(s.Summary, "9 more incidents") {
		t.Fatalf("flapping = %+v", s)
	}
	f.barrier(t)

	// It keeps flapping in the next window: one more summary, nothing else.
	flap(DefaultFlapWindow+2*time.Minute, 3)
	f.barrier(t)
	f.clock.Set(t0.Add(2*DefaultFlapWindow + 2*time.Minute))
	s2 := f.rcv.expect(t, KindFlapping, incident.Human)
	if len(s2.Instances) != 3 {
		t.Fatalf("second summary = %+v", s2)
	}
	f.barrier(t)
}

// An automatic recovery that still fails after EscalateAfter is escalated
// once, at level human; its recovery is then told at level human too.
func TestEscalationAfterLimit(t *testing.T) {
	f := newFixture(t)
	f.start(t, f.config(t))
	t0 := f.clock.Now()
	inc := f.open(t, "b1", incident.SignalConnection, incident.Auto)
	f.clock.Set(t0.Add(61 * time.Second))
	f.rcv.expect(t, KindOpen, incident.Auto)

	f.clock.Set(t0.Add(DefaultEscalateAfter + time.Second))
	e := f.rcv.expect(t, KindEscalated, incident.Human)
	if len(e.Instances) != 1 || e.Instances[0].Bot != "b1" || e.Instances[0].DowntimeSeconds < 300 || !strings.Contains(e.NextAction, "A person must act") {
		t.Fatalf("escalation = %+v", e)
	}
	f.clock.Add(30 * time.Minute)
	f.barrier(t)

	f.recover(t, inc, false)
	f.rcv.expect(t, KindRecovered, incident.Human)
	f.barrier(t)
}

// A new alerter on the same bucket (a restart, a failover) sends nothing
// the previous one sent.
func TestRestartedAlerterRepeatsNothing(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(t)
	_, stop := f.start(t, cfg)
	t0 := f.clock.Now()
	f.open(t, "b1", incident.SignalAuth, incident.Human)
	f.rcv.expect(t, KindOpen, incident.Human)
	b2 := f.open(t, "b2", incident.SignalConnection, incident.Auto)
	f.open(t, "b3", incident.SignalDelivery, incident.Human)
	f.rcv.expect(t, KindOpen, incident.Human)
	f.clock.Set(t0.Add(61 * time.Second))
	f.rcv.expect(t, KindOpen, incident.Auto)
	f.recover(t, b2, true)
	f.rcv.expect(t, KindRecovered, incident.Auto)
	f.clock.Set(t0.Add(DefaultEscalateAfter + time.Second)) // nothing left to escalate (b2 is back)
	f.barrier(t)
	stop()

	for range 2 {
		_, stop := f.start(t, cfg)
		f.barrier(t)
		stop()
	}
}

// The synthetic alert goes out on schedule through the sinks, and an
// alerter taking over does not send one again at once.
func TestSyntheticOnScheduleNotResentAfterRestart(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(t)
	cfg.Synthetic = time.Hour
	t0 := f.clock.Now()
	_, stop := f.start(t, cfg)
	s := f.rcv.expect(t, KindSynthetic, incident.Auto) // none ever sent: at once
	if len(s.Instances) != 0 || s.Instances == nil || !s.At.Equal(t0) {
		t.Fatalf("synthetic = %+v", s)
	}
	rec, _, ok, err := LastSynthetic(context.Background(), f.store.KV())
	if err != nil || !ok || !rec.At.Equal(t0) || rec.Node != "n1" || rec.ID != s.ID {
		t.Fatalf("record = %+v %v %v", rec, ok, err)
	}
	// The incident store does not see it.
	if all, err := f.store.List(context.Background(), incident.Filter{}); err != nil || len(all) != 0 {
		t.Fatalf("List = %v, %v", all, err)
	}

	f.clock.Add(30 * time.Minute)
	f.barrier(t)
	stop()

	cfg.NodeID = "n2"
	f.start(t, cfg)
	f.barrier(t) // not resent at once by the new alerter
	f.clock.Set(t0.Add(time.Hour + time.Second))
	s2 := f.rcv.expect(t, KindSynthetic, incident.Auto)
	if !strings.Contains(s2.Summary, "n2") || s2.ID == s.ID {
		t.Fatalf("second synthetic = %+v", s2)
	}
}

func TestConfigRefusesNonsense(t *testing.T) {
	sink := NewWebhook("http://127.0.0.1:1/x")
	for _, c := range []struct {
		field string
		cfg   Config
	}{
		{"NodeID", Config{Sinks: []Sink{sink}}},
		{"Sinks", Config{NodeID: "n"}},
		{"EscalateAfter", Config{NodeID: "n", Sinks: []Sink{sink}, Window: 10 * time.Minute}},
		{"MaxAttempts", Config{NodeID: "n", Sinks: []Sink{sink}, MaxAttempts: -1}},
		{"QueueSize", Config{NodeID: "n", Sinks: []Sink{sink}, QueueSize: -3}},
		{"MergeMin", Config{NodeID: "n", Sinks: []Sink{sink}, MergeMin: 1}},
		{"Backoff", Config{NodeID: "n", Sinks: []Sink{sink}, Backoff: 2 * time.Minute}},
		{"Sinks[0]", Config{NodeID: "n", Sinks: []Sink{nil}}},
	} {
		_, err := c.cfg.withDefaults()
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: err = %v", c.field, err)
		}
	}
	got, err := Config{NodeID: "n", Sinks: []Sink{sink}}.withDefaults()
	if err != nil || got.Window != DefaultWindow || got.EscalateAfter != DefaultEscalateAfter || got.FlapWindow != DefaultFlapWindow ||
		got.Synthetic != DefaultSynthetic || got.MaxAttempts != DefaultMaxAttempts || got.QueueSize != DefaultQueueSize {
		t.Fatalf("defaults = %+v, %v", got, err)
	}
}

// Bots needing a person at the same moment (every secret rotated at once)
// are one merged alert, sent at once: human alerts never wait for the
// window.
func TestHumanIncidentsTogetherMergeAtOnce(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(t)
	a, err := New(f.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, bot := range []string{"b1", "b2", "b3"} {
		f.open(t, bot, incident.SignalAuth, incident.Human)
	}
	run(t, a) // finds them together when it starts
	m := f.rcv.expect(t, KindMerged, incident.Human)
	if len(m.Instances) != 3 || m.CommonCause == "" {
		t.Fatalf("merged = %+v", m)
	}
	f.barrier(t)
}

// A sink subscribed to level human hears nothing of an automatic
// incident that botctl is fixing, while a sink of every level does; both
// hear what pages a person.
func TestHumanOnlySinkSkipsAutoAlerts(t *testing.T) {
	f := newFixture(t)
	pager := newReceiver(t)
	cfg := f.config(t)
	cfg.Sinks = append(cfg.Sinks, Subscribe(NewWebhook(pager.srv.URL), incident.Human))
	f.start(t, cfg)
	t0 := f.clock.Now()
	f.open(t, "b1", incident.SignalConnection, incident.Auto)
	f.clock.Set(t0.Add(61 * time.Second))
	f.rcv.expect(t, KindOpen, incident.Auto)
	f.barrier(t)
	if a := pager.expect(t, KindOpen, incident.Human); !strings.HasPrefix(a.Instances[0].Bot, "barrier-") {
		t.Fatalf("the pager's first alert = %+v, want the barrier's", a)
	}
}
