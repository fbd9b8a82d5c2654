package jetstream

import (
	"testing"
	"time"
)

// The rule, one probe at a time: failures while connected for After move
// the connection; failures for After more make the node off; a failure
// while disconnected counts for nothing; one success ends the spell.
func TestDecideHealth(t *testing.T) {
	const after = 30 * time.Second
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	failing := healthState{failingSince: t0}
	moved := healthState{failingSince: t0, moved: t0.Add(after)}
	off := healthState{failingSince: t0, moved: t0.Add(after), off: true}
	cases := []struct {
		name      string
		s         healthState
		ok, conn  bool
		now       time.Time
		want      healthState
		wantMoved bool
	}{
		{"healthy", healthState{}, true, true, t0, healthState{}, false},
		{"first failure starts the spell", healthState{}, false, true, t0, failing, false},
		{"failing, not yet After", failing, false, true, t0.Add(after - time.Second), failing, false},
		{"failing After: move the connection", failing, false, true, t0.Add(after), moved, true},
		{"moved, failing, not yet After again", moved, false, true, t0.Add(2*after - time.Second), moved, false},
		{"moved, failing After again: off", moved, false, true, t0.Add(2 * after), off, false},
		{"disconnected: nothing counts", failing, false, false, t0.Add(10 * after), failing, false},
		{"disconnected from the start: no spell", healthState{}, false, false, t0, healthState{}, false},
		{"off, then a success: on again", off, true, true, t0.Add(3 * after), healthState{}, false},
	}
	for _, c := range cases {
		got, act := decideHealth(c.s, c.ok, c.conn, c.now, after)
		if got != c.want || (act == healthReconnect) != c.wantMoved {
			t.Errorf("%s: %+v, moved %v; want %+v, moved %v", c.name, got, act == healthReconnect, c.want, c.wantMoved)
		}
	}
}
