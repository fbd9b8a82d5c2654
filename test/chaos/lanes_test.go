package main

import (
	"strings"
	"testing"
	"time"
)

// TestDealBalancesLanes: every scenario runs in exactly one lane, the
// three long freezes land on three different lanes, and no lane carries
// much more than its share.
func TestDealBalancesLanes(t *testing.T) {
	cfg := Config{}
	cfg.defaults()
	lanes := deal(Scenarios, 3, &cfg)
	if len(lanes) != 3 {
		t.Fatalf("%d lanes, want 3", len(lanes))
	}
	seen := map[string]int{}
	var total time.Duration
	loads := make([]time.Duration, len(lanes))
	for i, l := range lanes {
		freezes := 0
		for _, s := range l {
			seen[s.Name]++
			loads[i] += estimate(s, &cfg)
			if strings.HasPrefix(s.Name, "freeze-") {
				freezes++
			}
		}
		total += loads[i]
		if freezes > 1 {
			t.Errorf("lane %d has %d freeze scenarios", i+1, freezes)
		}
	}
	for _, s := range Scenarios {
		if seen[s.Name] != 1 {
			t.Errorf("%s runs in %d lanes", s.Name, seen[s.Name])
		}
	}
	for i, l := range loads {
		if l > total/3+cfg.Freeze {
			t.Errorf("lane %d: %s of %s", i+1, l, total)
		}
	}
	if got := deal(Scenarios[:2], 5, &cfg); len(got) != 2 {
		t.Errorf("2 scenarios over 5 lanes: %d lanes, want 2", len(got))
	}
}
