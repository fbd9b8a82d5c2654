package worker

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/pause"
)

// every runs fn each period of clk on its own goroutine until fn returns false,
// ctx ends, or stop is called; stop returns once the goroutine has ended.
func every(ctx context.Context, clk clock.Clock, period time.Duration, fn func(context.Context) bool) (stop func()) {
	return everyOr(ctx, clk, period, nil, 0, fn)
}

// everyOr is every, and also runs fn soon after each event: when the
// channel next returned closes, fn runs after a random pause of up to
// spread (the loops one event wakes do not all call at once). next is
// asked again before that pause, so an event during it or during fn is
// not missed (next's channel must stay closed once closed, as
// jetstream's Store.Reconnected's does). A nil next is every.
func everyOr(ctx context.Context, clk clock.Clock, period time.Duration, next func() <-chan struct{}, spread time.Duration,
	fn func(context.Context) bool) (stop func()) {
	ectx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := clk.NewTicker(period)
		defer t.Stop()
		var event <-chan struct{} // nil: never
		if next != nil {
			event = next()
		}
		for {
			select {
			case <-ectx.Done():
				return
			case <-t.C():
			case <-event:
				event = next()
				if spread > 0 && !pause.For(ectx, rand.N(spread)) {
					return
				}
			}
			if !fn(ectx) {
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}
