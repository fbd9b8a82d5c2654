package recovery

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
	"github.com/botctl/botctl/pkg/wecom"
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
	// refused is the connection's count of frames refused with 45009.
	refused atomic.Int64
}

func (c *fakeConn) Vitals() wecom.Vitals { return wecom.Vitals{RateLimited: c.refused.Load()} }

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

// One look of the observation at WeCom's quota refusals, as a table of
// single steps: no new refusal changes nothing; new ones (however many
// in one look) halve the rate, and the strikes-th look with new ones
// fails the window.
func TestQuotaLook(t *testing.T) {
	for _, c := range []struct {
		name    string
		in      trial
		refused int64
		strikes int
		want    trial
		verdict quotaVerdict
	}{
		{"quiet", trial{rate: 4, seen: 3}, 3, 2, trial{rate: 4, seen: 3}, quotaQuiet},
		{"first refusal halves", trial{rate: 4, seen: 3}, 4, 2, trial{rate: 2, strikes: 1, seen: 4}, quotaSlowed},
		{"a burst in one look is one strike", trial{rate: 4}, 5, 2, trial{rate: 2, strikes: 1, seen: 5}, quotaSlowed},
		{"repeated fails the window", trial{rate: 2, strikes: 1, seen: 5}, 6, 2, trial{rate: 1, strikes: 2, seen: 6}, quotaFailed},
		{"quiet after a strike keeps the halved rate", trial{rate: 2, strikes: 1, seen: 5}, 5, 2, trial{rate: 2, strikes: 1, seen: 5}, quotaQuiet},
		{"three strikes allowed", trial{rate: 2, strikes: 1, seen: 5}, 6, 3, trial{rate: 1, strikes: 2, seen: 6}, quotaSlowed},
		{"strikes 1: the first fails", trial{rate: 8}, 1, 1, trial{rate: 4, strikes: 1, seen: 1}, quotaFailed},
	} {
		got, v := c.in.look(c.refused, c.strikes)
		if got != c.want || v != c.verdict {
			t.Errorf("%s: look = %+v, %d; want %+v, %d", c.name, got, v, c.want, c.verdict)
		}
	}
}

// A 45009 while observing halves the backlog's drain rate; a second one
// fails the window: the backlog is held again for QuotaHold, the probes
// run again on the same connection, and the next window drains at the
// rate halved once more. Time moves only as the test steps it.
func TestHalfOpenQuotaSlowsThenHolds(t *testing.T) {
	conn := &fakeConn{done: make(chan struct{})}
	var g Gate
	clk := fakeclock.New(time.Now())
	notes := make(chan string, 100)
	cfg := Config{Probes: 1, Observe: 10 * time.Second, QuotaCheck: time.Second, QuotaHold: time.Minute, Clock: clk}
	done := halfOpen(cfg, conn, &g, 10, func(s string) { notes <- s })
	waitNote := func(part string) {
		t.Helper()
		for {
			select {
			case n := <-notes:
				if strings.Contains(n, part) {
					return
				}
			case <-time.After(time.Minute):
				t.Fatalf("no note saying %q", part)
			}
		}
	}
	waitNote("observing for 10s, backlog drains at 5.00")
	clk.AwaitWaiters(t, 1)
	conn.refused.Add(1)
	clk.Step(time.Second)
	waitNote("drain halved to 2.50")
	if g.Phase() != PhaseObserving {
		t.Fatalf("phase %s after one refusal, want observing", g.Phase())
	}
	// At 2.5 pushes/s, the push after one that goes now waits 400 ms.
	if now := clk.Now(); g.Wait(now) != 0 || g.Wait(now) < 300*time.Millisecond {
		t.Fatal("the backlog still drains at the rate before the refusal")
	}
	clk.AwaitWaiters(t, 1)
	clk.Step(time.Second) // a quiet look
	clk.AwaitWaiters(t, 1)
	conn.refused.Add(2)
	clk.Step(time.Second)
	waitNote("the window failed")
	if g.Phase() != PhaseProbing || g.Wait(clk.Now()) <= 0 {
		t.Fatalf("phase %s after the second refusal, want the backlog held", g.Phase())
	}
	clk.AwaitWaiters(t, 1)
	clk.Step(time.Minute - time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("ended while held: %+v %v", r.res, r.err)
	case <-clk.Waiting(t, 1):
	}
	if conn.probeCount() != 1 {
		t.Fatalf("%d probes before the hold ended", conn.probeCount())
	}
	clk.Step(time.Millisecond)
	waitNote("observing for 10s, backlog drains at 1.25")
	for range 10 {
		clk.AwaitWaiters(t, 1)
		clk.Step(time.Second)
	}
	r := <-done
	if r.err != nil || r.res.Online.IsZero() || r.res.FailedWindows != 1 || r.res.QuotaStrikes != 2 || r.res.DrainRate != 1.25 || conn.probeCount() != 2 {
		t.Fatalf("result %+v, %v after %d probes", r.res, r.err, conn.probeCount())
	}
	if g.Phase() != PhaseOnline || clk.HasWaiters() {
		t.Fatalf("phase %s, waiters %d after online", g.Phase(), clk.Waiters())
	}
}
