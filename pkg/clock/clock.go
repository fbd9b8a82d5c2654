// Package clock is botctl's one source of time to wait on: every timer,
// ticker, AfterFunc and sleep of production code goes through a Clock, so
// that a test can step time (internal/fakeclock) instead of sleeping and
// widening margins.
//
// The shapes are k8s.io/utils/clock's, by alias: a PassiveClock reads the
// time (Now, Since); a Clock also waits (NewTimer, NewTicker, AfterFunc,
// After, Sleep, Tick). Packages import this one, not k8s.io/utils/clock.
//
// Guarantees: Real's timers and tickers are the time package's, with
// their semantics unchanged (Stop and Reset return what time.Timer's
// return; since Go 1.23 no value sent before a Stop or Reset is received
// after it). A nil Clock field means Real (Or).
//
// Non-guarantees: this package does not measure or correct how far this
// node's clock is from others'; that is pkg/skew.
package clock

import (
	"context"
	"time"

	k8s "k8s.io/utils/clock"
)

// PassiveClock reads the time.
type PassiveClock = k8s.PassiveClock

// Clock reads the time and waits on it.
type Clock = k8s.WithTickerAndDelayedExecution

// Timer is a Clock's time.Timer: C, Stop and Reset.
type Timer = k8s.Timer

// Ticker is a Clock's time.Ticker: C and Stop.
type Ticker = k8s.Ticker

// Real is the machine's clock (the time package).
var Real Clock = k8s.RealClock{}

// Or returns c, or Real when c is nil: the default of a Clock field.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

// Sleep waits d on c, or until ctx ends, and reports whether the whole of
// d passed (false: ctx ended first). A nil c is Real.
func Sleep(ctx context.Context, c Clock, d time.Duration) bool {
	t := Or(c).NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
