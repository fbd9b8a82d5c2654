package alert

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
	"github.com/botctl/botctl/pkg/heal/incident"
)

// blip is an automatic connection incident of bot detected at det,
// recovered at rec (zero: still down), with the alerts already recorded.
func blip(bot string, det, rec time.Time, sent ...Kind) *incident.Incident {
	inc := &incident.Incident{ID: bot + "-" + det.Format("150405"), Bot: bot, Kind: incident.Outage,
		Signal: incident.SignalConnection, Level: incident.Auto, Detected: det, Dropped: det, Recovered: rec, State: incident.Open}
	if !rec.IsZero() {
		inc.State = incident.Recovering
	}
	for _, k := range sent {
		inc.Alerts = append(inc.Alerts, incident.Sent{Kind: string(k), Level: incident.Auto, At: det.Add(DefaultWindow), ID: string(k) + "-" + inc.ID})
	}
	return inc
}

// plansString is "kind/level:bot,bot" per plan, in order.
func plansString(plans []plan) string {
	var out []string
	for _, p := range plans {
		var bots []string
		for _, inc := range p.incs {
			bots = append(bots, inc.Bot)
		}
		out = append(out, string(p.kind)+"/"+string(p.level)+":"+strings.Join(bots, ","))
	}
	return strings.Join(out, " ")
}

// The alert rules for automatic incidents, one evaluation each: a blip
// that healed before its open alert was due sends nothing, neither open
// nor recovered; one still down when the window ends is told, and then
// its recovery.
func TestDecideHealedBlipSendsNothing(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	t0 := clk.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	cfg, err := Config{NodeID: "n", Sinks: []Sink{NewWebhook("http://127.0.0.1:1/x")}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		now  time.Duration
		incs []*incident.Incident
		want string
	}{
		{"healed in 6 s, window over", 61 * time.Second, []*incident.Incident{blip("b1", t0, at(6*time.Second))}, ""},
		{"healed in 6 s, past escalation", DefaultEscalateAfter + time.Minute, []*incident.Incident{blip("b1", t0, at(6*time.Second))}, ""},
		{"still down at the window's end", 61 * time.Second, []*incident.Incident{blip("b1", t0, time.Time{})}, "open/auto:b1"},
		{"told, then healed", 90 * time.Second, []*incident.Incident{blip("b1", t0, at(80*time.Second), KindOpen)}, "recovered/auto:b1"},
		{"still down after EscalateAfter", DefaultEscalateAfter + time.Second, []*incident.Incident{blip("b1", t0, time.Time{}, KindOpen)}, "escalated/human:b1"},
		{"a healed bot does not make a merge", 61 * time.Second, []*incident.Incident{
			blip("b1", t0, time.Time{}), blip("b2", at(10*time.Second), at(15*time.Second)),
		}, "open/auto:b1"},
		{"two bots down make a merge", 61 * time.Second, []*incident.Incident{
			blip("b1", t0, time.Time{}), blip("b2", at(10*time.Second), time.Time{}),
		}, "merged/human:b1,b2"},
		{"healed blips repeated: one summary", DefaultFlapWindow + time.Second, []*incident.Incident{
			blip("b1", t0, at(6*time.Second)), blip("b1", at(20*time.Second), at(26*time.Second)), blip("b1", at(40*time.Second), at(46*time.Second)),
		}, "flapping/human:b1,b1"},
		{"healed blips, window not over", 5 * time.Minute, []*incident.Incident{
			blip("b1", t0, at(6*time.Second)), blip("b1", at(20*time.Second), at(26*time.Second)),
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			all := map[string]*incident.Incident{}
			for _, inc := range c.incs {
				all[inc.ID] = inc
			}
			if got := plansString(decide(t0.Add(c.now), &cfg, all)); got != c.want {
				t.Fatalf("plans = %q, want %q", got, c.want)
			}
		})
	}
}

// A sink receives the levels it subscribed to, and the synthetic alert
// whatever they are.
func TestSubscribedLevelsRoute(t *testing.T) {
	for _, c := range []struct {
		levels Levels
		kind   Kind
		level  incident.Level
		want   bool
	}{
		{nil, KindOpen, incident.Auto, true},
		{nil, KindEscalated, incident.Human, true},
		{Levels{incident.Human}, KindOpen, incident.Auto, false},
		{Levels{incident.Human}, KindFlapping, incident.Auto, false},
		{Levels{incident.Human}, KindRecovered, incident.Human, true},
		{Levels{incident.Human}, KindSynthetic, incident.Auto, true},
		{Levels{incident.Auto}, KindMerged, incident.Human, false},
		{Levels{incident.Auto}, KindOpen, incident.Auto, true},
		{Levels{incident.Auto, incident.Human}, KindMerged, incident.Human, true},
	} {
		if got := c.levels.wants(Alert{Kind: c.kind, Level: c.level}); got != c.want {
			t.Errorf("levels %v, %s/%s: wants = %v, want %v", c.levels, c.kind, c.level, got, c.want)
		}
	}
	sink := NewWebhook("http://127.0.0.1:1/x")
	if got := levelsOf(Subscribe(sink, incident.Human)); !slices.Equal(got, Levels{incident.Human}) {
		t.Fatalf("levelsOf(Subscribe) = %v", got)
	}
	if got := levelsOf(sink); got != nil {
		t.Fatalf("levelsOf(plain sink) = %v", got)
	}
	if _, err := (Config{NodeID: "n", Sinks: []Sink{Subscribe(sink, "page")}}).withDefaults(); err == nil || !strings.Contains(err.Error(), "Sinks[0]") {
		t.Fatalf("a sink subscribed to a bad level: err = %v", err)
	}
	for _, bad := range [][]string{nil, {"page"}, {"auto", "Human"}} {
		if _, err := ParseLevels(bad); err == nil {
			t.Errorf("ParseLevels(%q) accepted", bad)
		}
	}
	if got, err := ParseLevels([]string{"human", "auto", "human"}); err != nil || !slices.Equal(got, Levels{incident.Human, incident.Auto}) {
		t.Fatalf("ParseLevels = %v, %v", got, err)
	}
}
