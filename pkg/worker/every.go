package worker

import (
	"context"
	"time"
)

// every runs fn each period on its own goroutine until fn returns false,
// ctx ends, or stop is called; stop returns once the goroutine has ended.
func every(ctx context.Context, period time.Duration, fn func(context.Context) bool) (stop func()) {
	ectx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ectx.Done():
				return
			case <-t.C:
				if !fn(ectx) {
					return
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}
