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

	rep := Summarize(all, time.Time{}, t0.Add(time.Minute))
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

// T2 is reported apart: the automatic step's (incidents botctl acted on
// first) and a person's acknowledgement (incidents acked, also those
// botctl acted on before); the self-heal rate over the month counts the
// month's incidents whatever the report's since.
func TestSummarizeSplitsT2AndRatesTheMonth(t *testing.T) {
	now := time.Date(2026, 12, 31, 12, 0, 0, 0, time.UTC)
	mk := func(ago time.Duration, acted string, t2 time.Duration, ack time.Duration, method Method) Incident {
		i := Incident{Bot: "a", Kind: Outage, State: Closed, Method: method, Dropped: now.Add(-ago)}
		i.Detected = i.Dropped.Add(time.Second)
		if acted != "" {
			i.Acted(i.Detected.Add(t2), acted)
		}
		if ack > 0 {
			i.FirstAck, i.AckedAt, i.AckedBy = i.Detected.Add(ack), i.Detected.Add(2*ack), "alice"
		}
		i.Recovered = i.Detected.Add(time.Minute)
		i.DataComplete, i.Closed = i.Recovered, i.Recovered
		return i
	}
	all := []Incident{
		mk(time.Hour, "auto: reconnect", 20*time.Millisecond, 0, MethodAuto),
		mk(2*time.Hour, "auto: reconnect", 40*time.Millisecond, 0, MethodAuto),
		mk(3*time.Hour, "auto: reconnect", 30*time.Millisecond, 10*time.Minute, MethodHuman), // escalated, then acked
		mk(4*time.Hour, "human: alice", 5*time.Minute, 5*time.Minute, MethodHuman),           // revoked secret: a person first
		// Older than the report's since but within the month: in the month's rate only.
		mk(10*24*time.Hour, "auto: reconnect", 10*time.Millisecond, 0, MethodAuto),
		mk(11*24*time.Hour, "human: bob", time.Minute, time.Minute, MethodHuman),
		// Older than a month: in neither.
		mk(40*24*time.Hour, "auto: reconnect", 10*time.Millisecond, 0, MethodAuto),
	}
	rep := Summarize(all, now.Add(-7*24*time.Hour), now)
	if len(rep) != 1 {
		t.Fatalf("%d reports", len(rep))
	}
	r := rep[0]
	if r.Incidents != 4 || r.T2.N != 4 {
		t.Fatalf("incidents %d, t2 n %d: want the 4 of the last 7 days", r.Incidents, r.T2.N)
	}
	if r.T2Auto.N != 3 || r.T2Auto.Median != 0.03 || r.T2Auto.Max != 0.04 {
		t.Fatalf("t2 auto %+v, want 3 automatic first steps, median 30 ms", r.T2Auto)
	}
	if r.T2Human.N != 2 || r.T2Human.Median != 300 || r.T2Human.Max != 600 {
		t.Fatalf("t2 human %+v, want 2 acks, 5 and 10 minutes after detection", r.T2Human)
	}
	if r.SelfHealed != 2 || r.SelfHealRate != 0.5 {
		t.Fatalf("self-heal %d, %g over the report, want 2 of 4", r.SelfHealed, r.SelfHealRate)
	}
	if r.MonthIncidents != 6 || r.MonthSelfHealed != 3 || r.SelfHealMonth != 0.5 {
		t.Fatalf("month %d incidents, %d healed, rate %g: want 3 of 6", r.MonthIncidents, r.MonthSelfHealed, r.SelfHealMonth)
	}
}
