package node

import (
	"math/rand/v2"
	"time"
)

// backoff is an exponential wait with jitter: each wait is drawn between
// half and all of the current step, and the step doubles up to max. The
// lower half is never skipped, so however often a path fails, it fails at
// most once per base/2, then once per max/2.
type backoff struct {
	base, max time.Duration
	step      time.Duration // 0: base
}

func (b *backoff) next() time.Duration {
	if b.step == 0 {
		b.step = b.base
	}
	d := b.step/2 + rand.N(b.step/2+1)
	b.step = min(2*b.step, b.max)
	return d
}

func (b *backoff) reset() { b.step = 0 }
