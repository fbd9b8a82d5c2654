package fakeclock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func fired(c <-chan time.Time) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestTimerFiresAtItsDeadlineNotBefore(t *testing.T) {
	c := New(t0)
	tm := c.NewTimer(time.Second)
	c.Step(999 * time.Millisecond)
	if fired(tm.C()) {
		t.Fatal("fired a millisecond early")
	}
	c.Step(time.Millisecond)
	select {
	case at := <-tm.C():
		if !at.Equal(t0.Add(time.Second)) {
			t.Fatalf("fired with %v, want the clock's time %v", at, t0.Add(time.Second))
		}
	default:
		t.Fatal("did not fire at its deadline")
	}
	if c.HasWaiters() {
		t.Fatal("a fired timer still waits")
	}
	if c.Since(t0) != time.Second || !c.Now().Equal(t0.Add(time.Second)) {
		t.Fatalf("Now %v, Since %v", c.Now(), c.Since(t0))
	}
}

// Stop and Reset report what time.Timer's report and drop a value sent
// but not received.
func TestTimerStopAndReset(t *testing.T) {
	c := New(t0)
	tm := c.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of a waiting timer: false")
	}
	if tm.Stop() {
		t.Fatal("Stop of a stopped timer: true")
	}
	c.Step(time.Hour)
	if fired(tm.C()) {
		t.Fatal("a stopped timer fired")
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a stopped timer: true")
	}
	if !tm.Reset(2 * time.Second) {
		t.Fatal("Reset of a waiting timer: false")
	}
	c.Step(time.Second)
	if fired(tm.C()) {
		t.Fatal("fired at the deadline Reset replaced")
	}
	c.Step(time.Second)
	// Fired and not received: Reset drops the value, as Go 1.23's timers do.
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a fired timer: true")
	}
	if fired(tm.C()) {
		t.Fatal("a value sent before Reset was received after it")
	}
	c.Step(time.Second)
	if !fired(tm.C()) {
		t.Fatal("a reset timer did not fire")
	}
}

func TestTimerOfZeroFiresAtOnce(t *testing.T) {
	c := New(t0)
	if !fired(c.NewTimer(0).C()) {
		t.Fatal("a zero timer did not fire at once")
	}
	tm := c.NewTimer(time.Hour)
	tm.Reset(-time.Second)
	if !fired(tm.C()) {
		t.Fatal("a timer reset to a negative duration did not fire at once")
	}
}

func TestTickerTicksEachPeriodAndDropsWhatNobodyTook(t *testing.T) {
	c := New(t0)
	tk := c.NewTicker(time.Second)
	c.Step(time.Second)
	if !fired(tk.C()) {
		t.Fatal("no tick after a period")
	}
	c.Step(time.Second)
	c.Step(time.Second) // the first tick is not taken: the second is dropped
	if !fired(tk.C()) || fired(tk.C()) {
		t.Fatal("want one tick held after two periods not received")
	}
	c.Step(500 * time.Millisecond)
	if fired(tk.C()) {
		t.Fatal("ticked mid-period")
	}
	tk.Stop()
	if c.HasWaiters() {
		t.Fatal("a stopped ticker still waits")
	}
	c.Step(time.Hour)
	if fired(tk.C()) {
		t.Fatal("a stopped ticker ticked")
	}
}

func TestAfterFuncRunsOnItsOwnGoroutineAndCanReadTheClock(t *testing.T) {
	c := New(t0)
	got := make(chan time.Time, 1)
	c.AfterFunc(time.Second, func() { got <- c.Now() }) // c.Now: no deadlock
	var stopped atomic.Bool
	tm := c.AfterFunc(time.Second, func() { stopped.Store(true) })
	if !tm.Stop() {
		t.Fatal("Stop of a waiting AfterFunc: false")
	}
	c.Step(time.Second)
	if at := <-got; !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("ran at %v", at)
	}
	if stopped.Load() {
		t.Fatal("a stopped AfterFunc ran")
	}
}

// BlockUntil returns once the code under test waits, so that the Step
// after it is seen: the step is never lost to a race.
func TestBlockUntilThenStep(t *testing.T) {
	c := New(t0)
	done := make(chan struct{})
	go func() {
		c.Sleep(time.Minute)
		<-c.After(time.Minute)
		close(done)
	}()
	c.BlockUntil(1)
	c.Step(time.Minute)
	c.BlockUntil(1)
	select {
	case <-done:
		t.Fatal("woke a minute early")
	default:
	}
	c.Step(time.Minute)
	<-done
	if c.Waiters() != 0 {
		t.Fatalf("%d waiters after both waits ended", c.Waiters())
	}
}

// A wait for waiters that never come ends with its context, saying how
// many there were.
func TestBlockUntilContextEnds(t *testing.T) {
	c := New(t0)
	c.NewTimer(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.BlockUntilContext(ctx, 2)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 waiting, not 2") {
		t.Fatalf("err %v, want the deadline and the count", err)
	}
	if err := c.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
}
