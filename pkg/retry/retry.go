// Package retry is botctl's one way of waiting between attempts: an
// exponential backoff with jitter (cenkalti/backoff's ExponentialBackOff
// draws the waits), waited on the injected clock so that tests can step
// it.
//
// Guarantees: a Backoff's steps start at Initial and double per attempt
// up to Max; each wait is drawn between half and all of its step, so that
// many callers failing at once do not retry in step, no wait exceeds Max,
// and however often a path fails it runs at most once per Initial/2, then
// once per Max/2. Until waits on its clock only, and returns as soon as
// ctx ends.
package retry

import (
	"context"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/cenkalti/backoff/v5"
)

// jitter is the randomization factor that makes ExponentialBackOff draw
// each wait from [step/2, step]: it draws from interval×(1±jitter), and
// the interval is kept at step/(1+jitter).
const jitter = 1.0 / 3

// Backoff is an exponential backoff with jitter. It is not safe for
// concurrent use: one per retrying loop.
type Backoff struct {
	eb *backoff.ExponentialBackOff
}

// New is a Backoff whose steps go from initial, doubling, up to max.
func New(initial, max time.Duration) *Backoff { return newBackoff(initial, max, jitter) }

// newBackoff is New with each wait drawn from [step×(1-r)/(1+r), step].
func newBackoff(initial, max time.Duration, r float64) *Backoff {
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) / (1 + r)) }
	eb := &backoff.ExponentialBackOff{
		InitialInterval:     scale(initial),
		RandomizationFactor: r,
		Multiplier:          2,
		MaxInterval:         scale(max),
	}
	eb.Reset()
	return &Backoff{eb: eb}
}

// Next is the wait before the next attempt.
func (b *Backoff) Next() time.Duration { return b.eb.NextBackOff() }

// Reset starts again from Initial (after a success).
func (b *Backoff) Reset() { b.eb.Reset() }

// Until calls op until it returns nil or an error done accepts (done nil:
// only nil ends it), waiting b.Next() on clk (nil: the real clock)
// between calls, for at most patience in all (0: no bound), and returns
// op's last error. op is called at least once; when ctx ends or the
// patience is spent, the error of op's last call is returned as it is.
func Until(ctx context.Context, clk clock.Clock, b *Backoff, patience time.Duration, op func() error, done func(error) bool) error {
	clk = clock.Or(clk)
	var deadline time.Time
	if patience > 0 {
		deadline = clk.Now().Add(patience)
	}
	for {
		err := op()
		if err == nil || done != nil && done(err) {
			return err
		}
		wait := b.Next()
		if !deadline.IsZero() {
			left := deadline.Sub(clk.Now())
			if left <= 0 {
				return err
			}
			wait = min(wait, left)
		}
		if !clock.Sleep(ctx, clk, wait) {
			return err
		}
	}
}
