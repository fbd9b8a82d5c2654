package recovery

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
)

// fakeConn is a connection whose probes and pushes are scripted: the unit
// under test is the sequence, not a socket (the health package's tests run
// it on the simulator).
type fakeConn struct {
	mu     sync.Mutex
	probes int
	fail   int // the probe number that fails (0: none)
	canary []string
	done   chan struct{}
}

func (c *fakeConn) Probe(context.Context, time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probes++
	if c.probes == c.fail {
		return errors.New("no ack")
	}
	return nil
}

func (c *fakeConn) SendMarkdown(_ context.Context, chat string, _ int, _ string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.canary = append(c.canary, chat)
	return nil
}

func (c *fakeConn) Done() <-chan struct{} { return c.done }

func (c *fakeConn) probeCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.probes
}

// halfOpen runs HalfOpen on a goroutine; its outcome arrives on the
// channel.
func halfOpen(cfg Config, conn *fakeConn, g *Gate, rate float64, note func(string)) <-chan halfOpenResult {
	out := make(chan halfOpenResult, 1)
	go func() {
		res, err := HalfOpen(context.Background(), cfg, conn, g, rate, note)
		out <- halfOpenResult{res, err}
	}()
	return out
}

type halfOpenResult struct {
	res Result
	err error
}

// The gate's phase is read at each of the recovery's notes, which it
// makes as each step begins (not sampled from another goroutine: a
// sampler scheduled late on a loaded machine missed the probing). Time
// moves only as the test steps it: the probes are ProbeInterval apart and
// the bot is online only once the whole observation window has passed.
func TestHalfOpenSequence(t *testing.T) {
	conn := &fakeConn{done: make(chan struct{})}
	var g Gate
	clk := fakeclock.New(time.Now())
	var mu sync.Mutex
	var notes []string
	cfg := Config{Probes: 3, ProbeInterval: 10 * time.Millisecond, Canary: "ops", Observe: 300 * time.Millisecond, Clock: clk}
	got := map[Phase]bool{}
	done := halfOpen(cfg, conn, &g, 10, func(s string) {
		mu.Lock()
		defer mu.Unlock()
		notes = append(notes, s)
		got[g.Phase()] = true
	})
	for i := 1; i < 3; i++ {
		clk.AwaitWaiters(t, 1) // waiting for probe i+1
		if n := conn.probeCount(); n != i {
			t.Fatalf("%d probes before the interval passed, want %d", n, i)
		}
		clk.Step(cfg.ProbeInterval)
	}
	clk.AwaitWaiters(t, 1) // observing
	clk.Step(cfg.Observe - time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("online before the observation window passed: %+v, %v", r.res, r.err)
	case <-clk.Waiting(t, 1):
	}
	clk.Step(time.Millisecond)
	r := <-done
	res, err := r.res, r.err
	if err != nil {
		t.Fatal(err)
	}
	if res.Probes != 3 || !res.Canary || len(conn.canary) != 1 || conn.canary[0] != "ops" || res.Online.IsZero() {
		t.Fatalf("result %+v, canary pushes %v", res, conn.canary)
	}
	if res.Observed != cfg.Observe || !res.Online.Equal(clk.Now()) {
		t.Fatalf("observed %s until %v, want %s until the clock's %v", res.Observed, res.Online, cfg.Observe, clk.Now())
	}
	if res.DrainRate != 5 {
		t.Fatalf("drain rate %g, want half of 10", res.DrainRate)
	}
	mu.Lock()
	defer mu.Unlock()
	if !got[PhaseProbing] || !got[PhaseObserving] || g.Phase() != PhaseOnline {
		t.Fatalf("phases seen %v, now %s", got, g.Phase())
	}
	if len(notes) != 3 {
		t.Fatalf("notes %q", notes)
	}
}

func TestHalfOpenStopsAtAFailedProbe(t *testing.T) {
	conn := &fakeConn{done: make(chan struct{}), fail: 2}
	var g Gate
	clk := fakeclock.New(time.Now())
	done := halfOpen(Config{Probes: 5, ProbeInterval: time.Millisecond, Clock: clk}, conn, &g, 0, func(string) {})
	select {
	case r := <-done:
		t.Fatalf("ended before the second probe's interval passed: %v after %d probes", r.err, conn.probeCount())
	case <-clk.Waiting(t, 1):
	}
	clk.Step(time.Millisecond)
	r := <-done
	if !errors.Is(r.err, ErrProbeFailed) || conn.probeCount() != 2 || len(conn.canary) != 0 {
		t.Fatalf("err %v after %d probes, canary %v", r.err, conn.probeCount(), conn.canary)
	}
	if clk.HasWaiters() {
		t.Fatal("a failed recovery left a timer waiting")
	}
	if g.Phase() != PhaseOnline {
		t.Fatal("gate left closed after a failed recovery")
	}
}

// The gate holds the backlog while probing, and lets it through at the
// drain rate while observing: at 2/s, 10 pushes asked at once get one
// token now and wait about half a second for each of the next.
func TestGateRates(t *testing.T) {
	var g Gate
	now := time.Now()
	if g.Wait(now) != 0 {
		t.Fatal("the zero gate holds")
	}
	g.set(PhaseProbing, 0)
	if g.Wait(now) <= 0 {
		t.Fatal("probing lets a backlog push through")
	}
	g.set(PhaseObserving, 2)
	if d := g.Wait(now); d != 0 {
		t.Fatalf("first push waits %s", d)
	}
	d := g.Wait(now)
	if d < 400*time.Millisecond || d > 600*time.Millisecond {
		t.Fatalf("second push at 2/s waits %s, want ~500ms", d)
	}
	// A refused reservation is not spent: asking again at the same time
	// gives the same wait, and after it passes one push goes.
	if d2 := g.Wait(now); d2 != d {
		t.Fatalf("asking again waits %s, then %s", d, d2)
	}
	if g.Wait(now.Add(d)) != 0 {
		t.Fatal("a push after its wait is held")
	}
	var within int
	for k := 0; k < 10; k++ {
		if g.Wait(now.Add(d)) == 0 {
			within++
		}
	}
	if within != 0 {
		t.Fatalf("%d more pushes at the same instant", within)
	}
}

// Asks out of order (the pusher's steps run at once, each asking with the
// time it began) never let a push through before the drain rate allows:
// at 2/s, after a push at now, an ask stamped earlier is held, and so is
// one at now+350ms. Before, the earlier ask moved the limiter's clock
// back and the push at now+350ms went, 150 ms early.
func TestGateAsksOutOfOrderKeepTheRate(t *testing.T) {
	var g Gate
	g.set(PhaseObserving, 2)
	now := time.Now()
	if d := g.Wait(now); d != 0 {
		t.Fatalf("first push waits %s", d)
	}
	if d := g.Wait(now.Add(-200 * time.Millisecond)); d <= 0 {
		t.Fatal("a push asked with an earlier time went at once")
	}
	if d := g.Wait(now.Add(350 * time.Millisecond)); d <= 0 {
		t.Fatal("a push 350 ms after the last one went, at 2/s (the earlier ask moved the limiter's clock back)")
	}
	if d := g.Wait(now.Add(500 * time.Millisecond)); d != 0 {
		t.Fatalf("a push 500 ms after the last one waits %s, at 2/s", d)
	}
}
