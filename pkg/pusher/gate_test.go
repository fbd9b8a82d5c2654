package pusher_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/heal/recovery"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// A backlog held through a half-open recovery: nothing is pushed while
// the probes run, then the answers owed drain at no more than the drain
// rate (half the bot's normal rate, 4 pushes/s here), as the simulator's
// timed recording of the pushes shows. Each push is checked against the
// drain's start, the one bound a loaded machine cannot break: a delay
// only makes a push later. (Measured between the first and the last push,
// with slack, a first push slowed down on its way shrank the span.) The
// drain's start is when the last probe's ack came back, read in the
// recovery's own goroutine before it opens the gate: its note after the
// gate opened ("observing for") could be read late, the recovery's
// goroutine stalled past a held push's next try, which then went before
// it.
func TestHalfOpenBacklogDrainsAtHalfTheNormalRate(t *testing.T) {
	t.Parallel()
	const (
		n          = 6
		normalRate = 4.0 // pushes/s
	)
	r := newRig(t, wecomsim.Config{})
	var ids []string
	for k := range n {
		user := fmt.Sprintf("u%d", k)
		rec := r.ask(user, "q")
		r.write(rec.ID, "the answer to "+user, true)
		ids = append(ids, rec.ID)
	}
	r.connect(2) // the bot came back: a new term owes the answers by push
	r.sim.StartRecording()

	var gate recovery.Gate
	probed := &timedProbes{Conn: r.conn}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	cfg := recovery.Config{Probes: 3, ProbeInterval: 500 * time.Millisecond, Observe: time.Minute, DrainFactor: 0.5}
	go func() {
		defer close(done)
		recovery.HalfOpen(ctx, cfg, probed, &gate, normalRate, func(string) {})
	}()
	t.Cleanup(func() { cancel(); <-done })
	r.start(pusher.Config{Gate: &gate})
	for _, id := range ids {
		r.waitDelivery(id, task.Delivered)
	}
	if p := gate.Phase(); p != recovery.PhaseObserving {
		t.Fatalf("gate %s once the backlog was delivered, want observing (probing: pushed while held; online: the drain outlasted the window)", p)
	}

	var pushes []time.Time
	for _, e := range r.sim.Recorded("b") {
		if e.Kind == wecomsim.RecordFrame && e.Cmd == wecom.CmdSendMsg {
			pushes = append(pushes, e.At)
		}
	}
	slices.SortFunc(pushes, time.Time.Compare)
	if len(pushes) != n {
		t.Fatalf("%d pushes recorded, want %d", len(pushes), n)
	}
	// The gate opens after the last probe is acked (no canary here): no
	// push can go before.
	began, probes := probed.last()
	if probes != cfg.Probes {
		t.Fatalf("%d probes acked, want %d", probes, cfg.Probes)
	}
	// Held while probing: the first push comes after the drain began
	// (50 ms of slack for the two clocks' readers).
	if pushes[0].Before(began.Add(-50 * time.Millisecond)) {
		t.Fatalf("first push at %s, before the drain began at %s", pushes[0].Format("15:04:05.000"), began.Format("15:04:05.000"))
	}
	// The drain's limiter (one push at once, then one per 1/drain) lets
	// push k through no sooner than k/drain after the drain began, and
	// it reaches the simulator after that: 2.5 s for the sixth at 2/s.
	// Unpaced, all six would come within milliseconds of the first, a
	// second or less after the drain began (the held steps ask again
	// every second).
	drain := normalRate * cfg.DrainFactor
	for k, at := range pushes {
		least := began.Add(time.Duration(float64(k)/drain*float64(time.Second)) - 50*time.Millisecond)
		if at.Before(least) {
			t.Fatalf("push %d of %d at %s after the drain began: faster than the drain rate %.1f/s allows (at least %s)",
				k+1, n, at.Sub(began).Round(time.Millisecond), drain, least.Sub(began).Round(time.Millisecond))
		}
	}
	t.Logf("%d pushes in %s, the last %s after the drain began (drain %.1f/s; unpaced they would not wait at all)",
		n, pushes[n-1].Sub(pushes[0]).Round(time.Millisecond), pushes[n-1].Sub(began).Round(time.Millisecond), drain)
	if held := r.p.Stats().Held; held == 0 {
		t.Fatal("no push was held by the gate")
	}
}

// timedProbes is the recovery's connection, noting when its last acked
// probe returned.
type timedProbes struct {
	*wecom.Conn
	mu     sync.Mutex
	at     time.Time
	probes int
}

func (c *timedProbes) Probe(ctx context.Context, timeout time.Duration) error {
	err := c.Conn.Probe(ctx, timeout)
	if err == nil {
		c.mu.Lock()
		c.at, c.probes = time.Now(), c.probes+1
		c.mu.Unlock()
	}
	return err
}

func (c *timedProbes) last() (time.Time, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at, c.probes
}
