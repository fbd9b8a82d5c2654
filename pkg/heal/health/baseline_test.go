package health

import (
	"testing"
	"time"
)

func TestBaselineThreshold(t *testing.T) {
	loc := time.UTC
	mon := time.Date(2026, 11, 30, 9, 30, 0, 0, loc) // a Monday, 09:30
	var b Baseline
	l := BaselineLimits{}
	if _, ok := b.Threshold(mon, loc, l); ok {
		t.Fatal("an empty baseline has an opinion")
	}
	// Five minutes watched: not enough data yet (MinWatched 10m).
	b.Observe(mon, loc, 5*time.Minute, 300)
	if _, ok := b.Threshold(mon, loc, l); ok {
		t.Fatal("opinion after 5 minutes")
	}
	// Ten minutes, 600 events: one a second → 7 s (Factor 7).
	b.Observe(mon, loc, 5*time.Minute, 300)
	d, ok := b.Threshold(mon, loc, l)
	if !ok || d != 7*time.Second {
		t.Fatalf("threshold %s %v, want 7s", d, ok)
	}
	// The floor: very busy traffic still waits 5 s.
	b.Observe(mon, loc, 0, 60000)
	if d, _ := b.Threshold(mon, loc, l); d != 5*time.Second {
		t.Fatalf("busy threshold %s, want the 5s floor", d)
	}
	// Another hour of the week knows nothing.
	if _, ok := b.Threshold(mon.Add(time.Hour), loc, l); ok {
		t.Fatal("10:00 has an opinion learnt at 09:00")
	}
	// The same hour a week later does.
	if _, ok := b.Threshold(mon.Add(7*24*time.Hour), loc, l); !ok {
		t.Fatal("next Monday 09:30 has no opinion")
	}
	// Memory is bounded: past four hours watched both counts halve, the
	// rate stays.
	var c Baseline
	c.Observe(mon, loc, 4*time.Hour, 14400)
	c.Observe(mon, loc, time.Hour, 3600)
	h := c.Hours[hourOfWeek(mon, loc)]
	if h.Watched > maxWatched || h.Events/h.Watched != 1 {
		t.Fatalf("hour after halving: %+v", h)
	}
	// No traffic at all at an hour with data: silence is normal there.
	var q Baseline
	q.Observe(mon, loc, time.Hour, 0)
	if _, ok := q.Threshold(mon, loc, l); ok {
		t.Fatal("an hour that never has traffic raises silence alarms")
	}
}
