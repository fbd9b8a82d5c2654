package node

import (
	"fmt"
	"testing"
	"time"
)

// The start's spread step: SpreadDelay for a few bots, SpreadWindow over
// the bots served for many, so a node of a thousand bots joins them all
// within about SpreadWindow.
func TestSpreadStep(t *testing.T) {
	for _, tc := range []struct {
		bots int
		want time.Duration
	}{
		{0, time.Second},
		{1, time.Second},
		{15, time.Second},
		{30, 500 * time.Millisecond},
		{1000, 15 * time.Millisecond},
	} {
		cfg := Config{}
		cfg.setDefaults()
		n := &Node{cfg: cfg, loops: map[string]*loop{}}
		for i := range tc.bots {
			n.loops[fmt.Sprint(i)] = &loop{}
		}
		if got := n.spreadStep(); got != tc.want {
			t.Errorf("%d bots: step %v, want %v", tc.bots, got, tc.want)
		}
		if last := time.Duration(max(0, tc.bots-1)) * n.spreadStep(); last > cfg.SpreadWindow && tc.bots > 15 {
			t.Errorf("%d bots: the last joins after %v, past SpreadWindow %v", tc.bots, last, cfg.SpreadWindow)
		}
	}
}
