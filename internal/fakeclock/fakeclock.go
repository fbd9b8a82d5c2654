// Package fakeclock is a clock.Clock for tests: time moves only when the
// test steps it, and the test can wait until the code under test waits.
//
// The pattern of a deterministic test: start the code, BlockUntil(n) it
// has registered its n timers, Step past the one that matters, check the
// outcome (or BlockUntil the next wait).
//
// It is not k8s.io/utils/clock/testing's FakeClock, whose shape it has,
// because that one keeps a stopped ticker among its waiters (so counting
// waiters stops meaning anything once a ticker stops), runs AfterFunc's
// function under its lock (a function that reads the clock deadlocks),
// and fires a timer of zero or less only on the next Step.
//
// Guarantees, as the time package's: a timer or ticker fires once time
// reaches its deadline; Stop and Reset report whether the timer was
// waiting and drop a value it sent but nobody received (Go 1.23's timers);
// a ticker whose value was not received drops the next one; AfterFunc's
// function runs on its own goroutine; a timer of zero or less fires at
// once; a ticker of zero or less panics.
package fakeclock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/clock"
)

// Clock is a fake clock.Clock. Make it with New.
type Clock struct {
	mu      sync.Mutex
	changed *sync.Cond // broadcast whenever waiters changes
	now     time.Time
	waiters []*waiter
}

// waiter is one timer, ticker or AfterFunc waiting for its deadline.
type waiter struct {
	at     time.Time
	every  time.Duration // ticker's period; 0: a timer
	c      chan time.Time
	f      func() // AfterFunc's; nil: send on c
	active bool   // among Clock.waiters
}

var _ clock.Clock = (*Clock)(nil)

// New is a fake clock reading now.
func New(now time.Time) *Clock {
	c := &Clock{now: now}
	c.changed = sync.NewCond(&c.mu)
	return c
}

// Now is the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Since is the fake time minus t.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// NewTimer is a timer that fires once the clock has been stepped d on.
func (c *Clock) NewTimer(d time.Duration) clock.Timer {
	w := &waiter{c: make(chan time.Time, 1)}
	c.mu.Lock()
	fire := c.armLocked(w, d)
	c.mu.Unlock()
	fire()
	return &timer{clk: c, w: w}
}

// AfterFunc runs f on its own goroutine once the clock has been stepped d
// on, unless the returned timer is stopped first.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	w := &waiter{f: f}
	c.mu.Lock()
	fire := c.armLocked(w, d)
	c.mu.Unlock()
	fire()
	return &timer{clk: c, w: w}
}

// After is NewTimer(d).C().
func (c *Clock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

// Sleep returns once the clock has been stepped d on (by another
// goroutine: a test's).
func (c *Clock) Sleep(d time.Duration) { <-c.After(d) }

// NewTicker is a ticker of period d.
func (c *Clock) NewTicker(d time.Duration) clock.Ticker {
	if d <= 0 {
		panic("fakeclock: non-positive interval for NewTicker")
	}
	w := &waiter{every: d, c: make(chan time.Time, 1)}
	c.mu.Lock()
	c.armLocked(w, d)
	c.mu.Unlock()
	return &ticker{clk: c, w: w}
}

// Tick is NewTicker(d).C(), or nil for d of zero or less (as time.Tick).
func (c *Clock) Tick(d time.Duration) <-chan time.Time {
	if d <= 0 {
		return nil
	}
	return c.NewTicker(d).C()
}

// Step moves the clock d on and fires every timer, ticker and AfterFunc
// whose deadline it reaches, earliest first.
func (c *Clock) Step(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*waiter
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			due = append(due, w)
		}
	}
	slices.SortStableFunc(due, func(a, b *waiter) int { return a.at.Compare(b.at) })
	var funcs []func()
	for _, w := range due {
		if f := c.fireLocked(w); f != nil {
			funcs = append(funcs, f)
		}
	}
	c.changed.Broadcast()
	c.mu.Unlock()
	for _, f := range funcs {
		go f()
	}
}

// Waiters is how many timers, tickers, AfterFuncs and sleeps wait now.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// HasWaiters reports whether anything waits on the clock.
func (c *Clock) HasWaiters() bool { return c.Waiters() > 0 }

// BlockUntil returns once at least n timers, tickers, AfterFuncs and
// sleeps wait on the clock: the code under test has reached its waits, and
// a Step now is seen by them.
func (c *Clock) BlockUntil(n int) { _ = c.BlockUntilContext(context.Background(), n) }

// BlockUntilContext is BlockUntil, or an error once ctx ends first.
func (c *Clock) BlockUntilContext(ctx context.Context, n int) error {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.changed.Broadcast()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.waiters) < n {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("fakeclock: %d waiting, not %d: %w", len(c.waiters), n, err)
		}
		c.changed.Wait()
	}
	return nil
}

// Waiting is closed once at least n wait on the clock (BlockUntil on its
// own goroutine, which ends with the test): a test selects on it and on
// the code's outcome to see which came first.
func (c *Clock) Waiting(t testing.TB, n int) <-chan struct{} {
	ch := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		if c.BlockUntilContext(ctx, n) == nil {
			close(ch)
		}
	}()
	return ch
}

// AwaitWaiters is BlockUntil(n) for a test: if the code under test does
// not reach its n waits within a minute (it ended, or waits on something
// else), the test fails saying so instead of hanging.
func (c *Clock) AwaitWaiters(t testing.TB, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.BlockUntilContext(ctx, n); err != nil {
		t.Fatalf("the code under test never waited on the clock: %v", err)
	}
}

// armLocked sets w to fire d from now and adds it to the waiters; a d of
// zero or less fires it at once: the caller calls the returned function
// after unlocking.
func (c *Clock) armLocked(w *waiter, d time.Duration) (fire func()) {
	w.at = c.now.Add(d)
	if !w.active {
		w.active = true
		c.waiters = append(c.waiters, w)
	}
	defer c.changed.Broadcast()
	if d <= 0 && w.every == 0 {
		if f := c.fireLocked(w); f != nil {
			return func() { go f() }
		}
	}
	return func() {}
}

// fireLocked fires w (due): a timer or AfterFunc leaves the waiters, a
// ticker moves to its next deadline after now. It returns AfterFunc's
// function, to be run after unlocking.
func (c *Clock) fireLocked(w *waiter) func() {
	if w.every > 0 {
		for !w.at.After(c.now) {
			w.at = w.at.Add(w.every)
		}
	} else {
		c.removeLocked(w)
	}
	if w.f != nil {
		return w.f
	}
	select {
	case w.c <- c.now:
	default: // a ticker's tick nobody took: dropped, as time.Ticker does
	}
	return nil
}

// removeLocked takes w out of the waiters, reporting whether it was in.
func (c *Clock) removeLocked(w *waiter) bool {
	if !w.active {
		return false
	}
	w.active = false
	c.waiters = slices.DeleteFunc(c.waiters, func(x *waiter) bool { return x == w })
	c.changed.Broadcast()
	return true
}

// drainLocked drops a value sent on w's channel but not received.
func drainLocked(w *waiter) {
	if w.c == nil {
		return
	}
	select {
	case <-w.c:
	default:
	}
}

type timer struct {
	clk *Clock
	w   *waiter
}

// C is the timer's channel (nil for AfterFunc's, as time.AfterFunc's).
func (t *timer) C() <-chan time.Time { return t.w.c }

// Stop stops the timer, reporting whether it was waiting.
func (t *timer) Stop() bool {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	drainLocked(t.w)
	return t.clk.removeLocked(t.w)
}

// Reset sets the timer to fire d from now, reporting whether it was
// waiting.
func (t *timer) Reset(d time.Duration) bool {
	t.clk.mu.Lock()
	drainLocked(t.w)
	was := t.w.active
	fire := t.clk.armLocked(t.w, d)
	t.clk.mu.Unlock()
	fire()
	return was
}

type ticker struct {
	clk *Clock
	w   *waiter
}

func (t *ticker) C() <-chan time.Time { return t.w.c }

// Stop stops the ticker: it waits no more.
func (t *ticker) Stop() {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	t.clk.removeLocked(t.w)
}
