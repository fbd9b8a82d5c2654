package skew

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
)

func TestProbeFindsANodeFortyMinutesOff(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	ctx := context.Background()
	good := Probe{KV: env.Store.Health(), Key: "clock.n1"}
	r, err := good.Measure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// One machine, one clock: the server's stamp lies within the probe's
	// round trip, so the offset is at most its Uncertainty (half the round
	// trip: milliseconds, but seconds in a stall of a loaded machine).
	if r.Off(5*time.Second) || r.Offset.Abs() > r.Uncertainty+100*time.Millisecond {
		t.Fatalf("a clock in sync: %+v", r)
	}
	for _, shift := range []time.Duration{40 * time.Minute, -40 * time.Minute} {
		p := Probe{KV: env.Store.Health(), Key: "clock.n2", Now: func() time.Time { return time.Now().Add(shift) }}
		r, err := p.Measure(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Off(5*time.Second) || (r.Offset+shift).Abs() > r.Uncertainty+100*time.Millisecond {
			t.Fatalf("a clock %s off: %+v", shift, r)
		}
		w := &Watch{Probe: p, Max: 5 * time.Second}
		if _, off := w.Off(); off {
			t.Fatal("a Watch that never measured is off")
		}
		wctx, cancel := context.WithCancel(ctx)
		changed := make(chan bool, 1)
		go w.Run(wctx, func(_ Reading, off bool) { changed <- off })
		if off := <-changed; !off {
			t.Fatal("Run reported a change to not off")
		}
		cancel()
		why, off := w.Off()
		want := map[bool]string{true: "ahead of", false: "behind"}[shift > 0]
		if !off || !strings.Contains(why, "40m") || !strings.Contains(why, want) || !strings.Contains(why, "nats.max_clock_skew") {
			t.Fatalf("Off() = %q, %v; want one naming 40m %s and nats.max_clock_skew", why, off, want)
		}
	}
	if (Reading{Offset: time.Hour}).Off(0) {
		t.Fatal("max 0 turns the check off")
	}
}
