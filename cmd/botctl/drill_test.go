package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/botctl/botctl/pkg/heal/drill"
)

// Each round is printed on stdout as it ends, with its T1, T2, T3 and the
// messages lost; the table with the alerts and the summary follow at the
// end. --json stays one document printed at the end; --json-lines prints a
// line per round as it ends, then that document on one line.
func TestDrillPrintsEachRoundAsItEnds(t *testing.T) {
	ok := drill.Round{N: 1, Kind: "drop", Incident: "inc-1", Level: "auto", Method: "auto", T1: 0.52, T2: 0.004, T3: 1.2, Downtime: 0.6, Sent: 12, Answered: 12}
	failed := drill.Round{N: 2, Kind: "drop", Sent: 5, Lost: 2, Answered: 3, Error: "round timed out"}
	// Alerts are read after the last round.
	final := []drill.Round{ok, failed}
	final[0].Alerts, final[0].AlertKinds, final[0].FirstAlert, final[0].Page = 2, []string{"open", "recovered"}, 60.1, -1
	final[1].FirstAlert, final[1].Page = -1, -1

	t.Run("table", func(t *testing.T) {
		var b bytes.Buffer
		o := &drillOutput{w: &b, bot: "b1", kind: "drop"}
		o.round(ok)
		if got, want := b.String(), "round 1 (drop) closed: incident inc-1, level auto, recovered auto: T1 0.52s, T2 0.004s, T3 1.20s, down 0.60s; 12 sent, 0 lost\n"; got != want {
			t.Fatalf("after round 1:\n%q\nwant\n%q", got, want)
		}
		o.round(failed)
		if got := b.String(); !strings.HasSuffix(got, "round 2 (drop) failed: round timed out; 5 sent, 2 lost\n") {
			t.Fatalf("after round 2:\n%s", got)
		}
		if err := o.end(final); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		if len(lines) != 7 || lines[2] != "" || !strings.HasPrefix(lines[3], "ROUND") || !strings.Contains(lines[4], "inc-1") ||
			!strings.HasPrefix(lines[6], "2 round(s), 1 failed:") || !strings.HasSuffix(lines[6], "17 sent, 2 lost") {
			t.Fatalf("output:\n%s", b.String())
		}
	})

	t.Run("json", func(t *testing.T) {
		var b bytes.Buffer
		o := &drillOutput{w: &b, bot: "b1", kind: "drop", json: true}
		o.round(ok)
		o.round(failed)
		if b.Len() != 0 {
			t.Fatalf("--json printed before the end: %s", b.String())
		}
		if err := o.end(final); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Bot     string        `json:"bot"`
			Rounds  []drill.Round `json:"rounds"`
			Summary drill.Summary `json:"summary"`
		}
		if err := json.Unmarshal(b.Bytes(), &doc); err != nil { // one value, as TestDrillDrop reads it
			t.Fatalf("%v\n%s", err, b.String())
		}
		if doc.Bot != "b1" || len(doc.Rounds) != 2 || doc.Rounds[0].Alerts != 2 || doc.Summary.Lost != 2 {
			t.Fatalf("document %+v", doc)
		}
	})

	t.Run("json lines", func(t *testing.T) {
		var b bytes.Buffer
		o := &drillOutput{w: &b, bot: "b1", kind: "drop", lines: true}
		o.round(ok)
		var first map[string]any
		if err := json.Unmarshal(b.Bytes(), &first); err != nil {
			t.Fatalf("round 1's line: %v\n%s", err, b.String())
		}
		if first["bot"] != "b1" || first["round"] != 1.0 || first["t1_s"] != 0.52 || first["t2_s"] != 0.004 || first["t3_s"] != 1.2 || first["lost"] != 0.0 {
			t.Fatalf("round 1's line: %s", b.String())
		}
		if _, ok := first["alerts"]; ok {
			t.Fatalf("round 1's line has alerts, which are read after the last round: %s", b.String())
		}
		o.round(failed)
		if err := o.end(final); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		if len(lines) != 3 {
			t.Fatalf("want 3 lines:\n%s", b.String())
		}
		var second map[string]any
		if err := json.Unmarshal([]byte(lines[1]), &second); err != nil || second["error"] != "round timed out" || second["lost"] != 2.0 {
			t.Fatalf("round 2's line (%v): %s", err, lines[1])
		}
		var doc struct {
			Kind   string        `json:"kind"`
			Rounds []drill.Round `json:"rounds"`
		}
		if err := json.Unmarshal([]byte(lines[2]), &doc); err != nil || doc.Kind != "drop" || len(doc.Rounds) != 2 || doc.Rounds[0].Alerts != 2 {
			t.Fatalf("last line (%v): %s", err, lines[2])
		}
	})
}

// The drill's own flags refused before anything is reached, as usage
// errors that name the fix.
func TestDrillRefusesBadFlags(t *testing.T) {
	for _, c := range []struct {
		args    []string
		mention string
	}{
		{[]string{"--kind", "drop", "--wecom-history"}, "--duration"},
		{[]string{"--kind", "silence", "--duration", "1m", "--wecom-history"}, "--kind drop"},
		{[]string{"--kind", "flood"}, "group-silence"},
	} {
		args := append([]string{"drill", "--bot", "b1", "--sim", "http://127.0.0.1:1"}, c.args...)
		_, errOut, code := runBotctl(t, args...)
		if code != 2 || !strings.Contains(errOut, c.mention) {
			t.Errorf("%v: exit %d, %q; want a usage error (2) naming %q", c.args, code, errOut, c.mention)
		}
	}
}
