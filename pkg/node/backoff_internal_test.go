package node

import (
	"testing"
	"time"
)

// Each wait lies between half and all of its step; steps double up to max;
// reset starts over. The lower half is what bounds the rate of a loop.
func TestBackoffJitterBounds(t *testing.T) {
	b := backoff{base: 100 * time.Millisecond, max: time.Second}
	for round := range 2 {
		step := b.base
		for i := range 8 {
			d := b.next()
			if d < step/2 || d > step {
				t.Fatalf("round %d wait %d = %s, want within [%s, %s]", round, i, d, step/2, step)
			}
			step = min(2*step, b.max)
		}
		b.reset()
	}
}
