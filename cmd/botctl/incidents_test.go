package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/heal/incident"
)

// incidents list --json gives each incident as stored plus its times in
// seconds (t1_s, t2_s, t3_s, downtime_s), each left out while not known;
// incidents show --json prints one the same way, and incidents ack --json
// the incident after the ack.
func TestIncidentsJSONTimesAndAck(t *testing.T) {
	js := testenv.StartJetStream(t, jetstream.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	incs := incident.NewStore(js.Store.Incidents())
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second) // before the ack
	outage, err := incs.Open(ctx, incident.Incident{Bot: "b1", Kind: incident.Outage, Level: incident.Auto,
		Signal: incident.SignalConnection, Reason: "connection dropped", Dropped: t0, Detected: t0.Add(1500 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := incs.Update(ctx, "b1", outage.ID, func(i *incident.Incident) error {
		i.Acted(t0.Add(1502*time.Millisecond), "auto: reconnect")
		i.Recovered, i.Online, i.DataComplete = t0.Add(4*time.Second), t0.Add(4*time.Second), t0.Add(9250*time.Millisecond)
		i.Close(i.DataComplete)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	data, err := incs.Open(ctx, incident.Incident{Bot: "b1", Kind: incident.Data, Level: incident.Human,
		Signal: incident.SignalDelivery, Reason: "a final answer could not be delivered", Dropped: t0.Add(time.Minute), Detected: t0.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	nats := []string{"--nats", js.Server.ClientURL()}

	type view struct {
		incident.Incident
		T1       *float64 `json:"t1_s"`
		T2       *float64 `json:"t2_s"`
		T3       *float64 `json:"t3_s"`
		Downtime *float64 `json:"downtime_s"`
	}
	num := func(p *float64) any {
		if p == nil {
			return nil
		}
		return *p
	}
	out, err := run(t, append([]string{"incidents", "list", "--json"}, nats...)...)
	if err != nil {
		t.Fatalf("incidents list --json: %v\n%s", err, out)
	}
	var list struct {
		Incidents []view `json:"incidents"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Incidents) != 2 {
		t.Fatalf("incidents list --json (%v):\n%s", err, out)
	}
	o, d := list.Incidents[0], list.Incidents[1]
	if o.ID != outage.ID || o.State != incident.Closed || o.Reason != "connection dropped" || o.Detected != outage.Detected {
		t.Errorf("the outage's stored fields changed: %+v", o.Incident)
	}
	if num(o.T1) != 1.5 || num(o.T2) != 0.002 || num(o.T3) != 5.25 || num(o.Downtime) != 4.0 {
		t.Errorf("outage times t1 %v t2 %v t3 %v downtime %v, want 1.5 0.002 5.25 4\n%s", num(o.T1), num(o.T2), num(o.T3), num(o.Downtime), out)
	}
	// Open, not acted on: T2 and T3 are not known, and not printed as 0.
	if d.ID != data.ID || num(d.T1) != 0.0 || d.T2 != nil || d.T3 != nil || num(d.Downtime) != 0.0 {
		t.Errorf("data incident times t1 %v t2 %v t3 %v downtime %v, want 0, none, none, 0\n%s", num(d.T1), num(d.T2), num(d.T3), num(d.Downtime), out)
	}
	var raw struct {
		Incidents []map[string]any `json:"incidents"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw.Incidents[1]["t2_s"]; ok {
		t.Errorf("t2_s of an incident nobody acted on is printed: %v", raw.Incidents[1])
	}

	out, err = run(t, append([]string{"incidents", "show", outage.ID, "--json"}, nats...)...)
	if err != nil {
		t.Fatalf("incidents show --json: %v\n%s", err, out)
	}
	var shown view
	if err := json.Unmarshal([]byte(out), &shown); err != nil {
		t.Fatalf("incidents show --json: %v\n%s", err, out)
	}
	if shown.ID != outage.ID || shown.Reason != "connection dropped" || num(shown.T1) != 1.5 || num(shown.T2) != 0.002 || num(shown.T3) != 5.25 || num(shown.Downtime) != 4.0 {
		t.Errorf("incidents show --json: %+v t1 %v t2 %v t3 %v downtime %v\n%s", shown.Incident, num(shown.T1), num(shown.T2), num(shown.T3), num(shown.Downtime), out)
	}

	out, err = run(t, append([]string{"incidents", "ack", data.ID, "--by", "alice", "--note", "told the user", "--json"}, nats...)...)
	if err != nil {
		t.Fatalf("incidents ack --json: %v\n%s", err, out)
	}
	var acked view
	if err := json.Unmarshal([]byte(out), &acked); err != nil {
		t.Fatalf("incidents ack --json: %v\n%s", err, out)
	}
	if acked.ID != data.ID || acked.AckedBy != "alice" || acked.State != incident.Closed || acked.Method != incident.MethodHuman || acked.T2 == nil || *acked.T2 <= 0 {
		t.Errorf("after the ack: %+v t2 %v\n%s", acked.Incident, num(acked.T2), out)
	}

	// Without --json, the sentence it always printed.
	out, err = run(t, append([]string{"incidents", "ack", outage.ID, "--by", "bob"}, nats...)...)
	if err != nil || out != "incident "+outage.ID+" acknowledged by bob (state closed)\n" {
		t.Errorf("incidents ack: %v %q", err, out)
	}

	// The report: the outage's automatic step (2 ms) and the two acks
	// (about an hour after detection) apart; the month's self-heal rate
	// (the outage healed by itself, the data incident needed alice) even
	// over a --since that leaves both out.
	for _, c := range []struct {
		since     string
		incidents int
	}{{"7d", 2}, {"30m", 0}} {
		out, err = run(t, append([]string{"incidents", "report", "--json", "--since", c.since}, nats...)...)
		var rep struct {
			Bots []incident.Report `json:"bots"`
		}
		if err != nil || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Bots) != 1 {
			t.Fatalf("incidents report --since %s: %v\n%s", c.since, err, out)
		}
		r := rep.Bots[0]
		if r.Incidents != c.incidents || r.MonthIncidents != 2 || r.MonthSelfHealed != 1 || r.SelfHealMonth != 0.5 {
			t.Errorf("report --since %s: %d incidents, month %d/%d (%g)\n%s", c.since, r.Incidents, r.MonthSelfHealed, r.MonthIncidents, r.SelfHealMonth, out)
		}
		if c.incidents == 2 && (r.T2Auto.N != 1 || r.T2Auto.Max != 0.002 || r.T2Human.N != 2 || r.T2Human.Median < 3000) {
			t.Errorf("report T2 auto %+v, human %+v: want the 2 ms reconnect apart from the acks an hour on\n%s", r.T2Auto, r.T2Human, out)
		}
	}
	out, err = run(t, append([]string{"incidents", "report"}, nats...)...)
	if err != nil || !strings.Contains(out, "T2 AUTO") || !strings.Contains(out, "T2 ACK") || !strings.Contains(out, "SELF-HEAL 30d") {
		t.Errorf("incidents report: %v\n%s", err, out)
	}
}

// show names a route silence's route and states the gap's lost events.
func TestPrintIncidentRouteAndEvents(t *testing.T) {
	var out strings.Builder
	i := &incident.Incident{ID: "i1", Bot: "b1", Kind: incident.Outage, Signal: incident.SignalRouteSilence, Route: "group:g1",
		Backfill: incident.Backfill{Events: "user events sent in group:g1 between … are lost"}}
	printIncident(&out, i, time.Now())
	for _, want := range []string{"signal route_silence (group:g1)", "events: user events sent in group:g1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("show lacks %q:\n%s", want, out.String())
		}
	}
}
