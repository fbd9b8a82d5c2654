package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
)

// Each wait lies between half and all of its step; the steps double from
// Initial and stop at Max; Reset starts again. The lower half is what
// bounds the rate of a loop.
func TestBackoffStepsAndJitter(t *testing.T) {
	for range 100 {
		b := New(100*time.Millisecond, time.Second)
		steps := []time.Duration{100, 200, 400, 800, 1000, 1000}
		for round := range 2 {
			for i, step := range steps {
				step *= time.Millisecond
				if d := b.Next(); d < step/2 || d > step {
					t.Fatalf("round %d wait %d: %v, want within [%v, %v]", round, i, d, step/2, step)
				}
			}
			b.Reset()
		}
	}
	// The jitter spreads the waits: 50 draws of one step are not all equal.
	seen := map[time.Duration]bool{}
	for range 50 {
		seen[New(time.Second, time.Second).Next()] = true
	}
	if len(seen) < 2 {
		t.Fatal("50 waits drawn without jitter")
	}
	if d := newBackoff(time.Second, time.Second, 0).Next(); d != time.Second {
		t.Fatalf("no jitter: %v", d)
	}
}

var errBusy = errors.New("busy")

// Until retries on the clock until op succeeds, done accepts its error,
// the patience is spent or ctx ends, and returns op's last error.
func TestUntil(t *testing.T) {
	t.Run("succeeds after retries", func(t *testing.T) {
		clk := fakeclock.New(time.Unix(0, 0))
		calls := 0
		errc := make(chan error, 1)
		go func() {
			errc <- Until(context.Background(), clk, newBackoff(time.Second, 4*time.Second, 0), 0, func() error {
				if calls++; calls < 4 {
					return errBusy
				}
				return nil
			}, nil)
		}()
		for _, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
			clk.AwaitWaiters(t, 1)
			clk.Step(d)
		}
		if err := <-errc; err != nil || calls != 4 {
			t.Fatalf("Until = %v after %d calls, want nil after 4", err, calls)
		}
	})
	t.Run("done accepts an error", func(t *testing.T) {
		final := errors.New("final")
		calls := 0
		err := Until(context.Background(), fakeclock.New(time.Unix(0, 0)), New(time.Second, time.Second), 0,
			func() error { calls++; return final }, func(err error) bool { return errors.Is(err, final) })
		if !errors.Is(err, final) || calls != 1 {
			t.Fatalf("Until = %v after %d calls", err, calls)
		}
	})
	t.Run("patience", func(t *testing.T) {
		clk := fakeclock.New(time.Unix(0, 0))
		calls := 0
		errc := make(chan error, 1)
		go func() {
			errc <- Until(context.Background(), clk, newBackoff(time.Second, time.Second, 0), 2500*time.Millisecond,
				func() error { calls++; return errBusy }, nil)
		}()
		for _, d := range []time.Duration{time.Second, time.Second, 500 * time.Millisecond} {
			clk.AwaitWaiters(t, 1)
			clk.Step(d)
		}
		if err := <-errc; !errors.Is(err, errBusy) || calls != 4 {
			t.Fatalf("Until = %v after %d calls, want busy after 4 (at 0, 1, 2 and 2.5 s)", err, calls)
		}
	})
	t.Run("ctx ends the wait", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		clk := fakeclock.New(time.Unix(0, 0))
		errc := make(chan error, 1)
		go func() {
			errc <- Until(ctx, clk, New(time.Hour, time.Hour), 0, func() error { return errBusy }, nil)
		}()
		clk.AwaitWaiters(t, 1)
		cancel()
		if err := <-errc; !errors.Is(err, errBusy) {
			t.Fatalf("Until = %v, want op's last error", err)
		}
	})
}
