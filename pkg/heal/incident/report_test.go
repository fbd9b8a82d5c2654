package incident

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	mk := func(bot string, t1, t2, t3 time.Duration, method Method) Incident {
		i := Incident{Bot: bot, Kind: Outage, State: Closed, Method: method, Dropped: t0}
		i.Detected = t0.Add(t1)
		i.FirstAction = i.Detected.Add(t2)
		i.Recovered = i.FirstAction.Add(time.Second)
		i.DataComplete = i.Recovered.Add(t3)
		i.Closed = i.DataComplete
		return i
	}
	var all []Incident
	for k := 1; k <= 10; k++ {
		all = append(all, mk("a", time.Duration(k)*time.Second, 100*time.Millisecond, time.Duration(k)*time.Second, MethodAuto))
	}
	all[9].Method = MethodHuman
	open := Incident{Bot: "b", Kind: Outage, State: Open, Dropped: t0, Detected: t0.Add(2 * time.Second)}
	all = append(all, open)

	rep := Summarize(all, t0.Add(time.Minute))
	if len(rep) != 2 {
		t.Fatalf("%d reports", len(rep))
	}
	a, b := rep[0], rep[1]
	if a.Bot != "a" || a.Incidents != 10 || a.T1.Median != 5 || a.T1.P90 != 9 || a.T1.Max != 10 || a.T2.Median != 0.1 {
		t.Fatalf("a: %+v", a)
	}
	if a.SelfHealed != 9 || a.SelfHealRate != 0.9 {
		t.Fatalf("a self-heal: %+v", a)
	}
	// Downtime: dropped → recovered = t1 + t2 + 1s each.
	want := 0.0
	for k := 1; k <= 10; k++ {
		want += float64(k) + 0.1 + 1
	}
	if diff := a.DowntimeSeconds - want; diff > 1e-6 || diff < -1e-6 {
		t.Fatalf("a downtime %g, want %g", a.DowntimeSeconds, want)
	}
	if b.Open != 1 || b.SelfHealRate != 0 || b.DowntimeSeconds != 60 || b.T2.N != 0 || b.T1.Median != 2 {
		t.Fatalf("b: %+v", b)
	}
}
