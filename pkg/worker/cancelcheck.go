package worker

// The cancel check: a running task's record is read again in case the
// announcement of its cancellation was lost.

import (
	"context"
	"time"
)

// cancelCheck is how often a running task's record is re-read, in case an
// announcement was missed, and a record is also re-read (within
// reconnectSpread) each time the worker's NATS connection comes back: a
// core NATS announcement is lost when it is published while the
// connection is away, rarely otherwise (a slow subscriber dropping it). A
// /stop whose announcement was lost stops the run within this (the user
// is told at once either way: the pusher reads the record), and a later
// attempt's takeover is also found by the fenced output writer at its
// next write. Each re-read of an R3 bucket is a JetStream API request to
// its leader: at 15 s (until issue 28) they were four of a one-minute
// answer's eleven record reads. A var for tests.
var cancelCheck = time.Minute

// reconnectSpread spreads the re-reads of a reconnect: thousands of
// running tasks do not ask the bucket's leader at once.
const reconnectSpread = 5 * time.Second

// checkCancel re-reads the record every cancelCheck, and after each
// reconnect of the store's connection (jetstream's Store.Reconnected:
// one during a re-read is not missed), and ends the run once the task is
// canceled or another attempt took it over.
func (w *Worker) checkCancel(ctx context.Context, id string, attempt int, cancel context.CancelCauseFunc) (stop func()) {
	return everyOr(ctx, w.clock(), cancelCheck, w.buckets.Reconnected, reconnectSpread, func(ctx context.Context) bool {
		return w.stillOurs(ctx, id, attempt, cancel)
	})
}

// stillOurs reads the record: a canceled task or another attempt's ends
// the run (false).
func (w *Worker) stillOurs(ctx context.Context, id string, attempt int, cancel context.CancelCauseFunc) bool {
	gctx, gcancel := context.WithTimeout(ctx, storeCallTimeout)
	r, err := w.cfg.Lifecycle.Get(gctx, id)
	gcancel()
	switch {
	case err != nil:
		if ctx.Err() == nil { // not the run ending under the read
			w.storeError("record_read", err)
		}
		return true
	case r.Exec.Finished():
		cancel(errCanceled)
		return false
	case r.Attempt != attempt:
		cancel(errSuperseded)
		return false
	}
	return true
}
