// Package skew bounds how far this node's clock may be from the data
// plane's.
//
// Nodes compare times written by other nodes with their own: a task's
// execution deadline counts from when a worker started it, the pusher's
// per-conversation budget is seeded with the send times the previous
// leader recorded, the health signals' silence and a replay's expiry are
// times too. A node whose clock is 40 minutes off would give up every
// task at once, or none for 40 minutes, and count sends in the wrong
// window. botctl does not correct such a clock; it keeps such a node out:
// a node whose clock is off by more than the bound (nats.max_clock_skew)
// campaigns for no bot and runs no task until it is fixed, says so in its
// state, /readyz and log, and every other node goes on.
//
// The reference is JetStream's: the time the stream leader stamps on a
// message it stores (a KV entry's Created). A Probe puts one small entry
// and reads its stamp; the offset is that stamp minus the middle of the
// put, known to within half the put's round trip.
//
// Guarantees: a node Off by this package's reading is more than max off
// the reference by at least the uncertainty. Non-guarantees: NATS servers
// whose own clocks disagree move the reference between stream leaders
// (run NTP on them too); a node never measured (JetStream unreachable) is
// not Off.
package skew

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Reading is one measurement of this node's clock against the reference.
type Reading struct {
	// Offset is the reference's time minus this node's: positive when this
	// node's clock is behind.
	Offset time.Duration `json:"offset"`
	// Uncertainty bounds the error of Offset (half the put's round trip).
	Uncertainty time.Duration `json:"uncertainty"`
	At          time.Time     `json:"at"` // this node's time of the reading
}

// Off reports whether r shows this node's clock more than max off (max 0:
// never).
func (r Reading) Off(max time.Duration) bool {
	return max > 0 && r.Offset.Abs()-r.Uncertainty > max
}

// Probe measures against a KV bucket, writing Key.
type Probe struct {
	KV  natsjs.KeyValue
	Key string
	// Now is this node's clock. Default time.Now (tests shift it).
	Now func() time.Time
}

// Measure puts one entry and reads the stamp the server gave it.
func (p Probe) Measure(ctx context.Context) (Reading, error) {
	now := p.Now
	if now == nil {
		now = time.Now
	}
	t0 := now()
	rev, err := p.KV.Put(ctx, p.Key, []byte(t0.UTC().Format(time.RFC3339Nano)))
	t1 := now()
	if err != nil {
		return Reading{}, fmt.Errorf("clock probe: put %s: %w", p.Key, err)
	}
	e, err := p.KV.GetRevision(ctx, p.Key, rev)
	if err != nil {
		return Reading{}, fmt.Errorf("clock probe: read %s back: %w", p.Key, err)
	}
	rtt := t1.Sub(t0)
	mid := t0.Add(rtt / 2)
	return Reading{Offset: e.Created().Sub(mid), Uncertainty: rtt / 2, At: t1}, nil
}

// Watch measures with a Probe every Interval and says whether the node's
// clock is off. Its zero readings (never measured) are not off.
type Watch struct {
	Probe    Probe
	Max      time.Duration // nats.max_clock_skew; 0 turns the check off
	Interval time.Duration // default a minute
	Clock    clock.Clock   // what Run waits on between readings; default clock.Real

	mu  sync.Mutex
	r   Reading
	err error
}

// Run measures until ctx ends; call it once JetStream answers.
func (w *Watch) Run(ctx context.Context, onChange func(r Reading, off bool)) {
	every := w.Interval
	if every <= 0 {
		every = time.Minute
	}
	wasOff := false
	for {
		mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := w.Probe.Measure(mctx)
		cancel()
		w.mu.Lock()
		if err == nil {
			w.r = r
		}
		w.err = err
		w.mu.Unlock()
		if err == nil {
			if off := r.Off(w.Max); off != wasOff && onChange != nil {
				wasOff = off
				onChange(r, off)
			}
		}
		if !clock.Sleep(ctx, w.Clock, every) {
			return
		}
	}
}

// Reading is the latest reading (zero: none yet).
func (w *Watch) Reading() Reading {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.r
}

// Off says why this node's clock is not to be trusted, if it is not.
func (w *Watch) Off() (string, bool) {
	if w == nil {
		return "", false
	}
	r := w.Reading()
	if !r.Off(w.Max) {
		return "", false
	}
	dir := "ahead of"
	if r.Offset > 0 {
		dir = "behind"
	}
	// Milliseconds matter near the bound, not past a minute: a node 40
	// minutes off reads "40m0s", not "39m59.999s" (the probe's round trip).
	off := r.Offset.Abs()
	if off >= time.Minute {
		off = off.Round(time.Second)
	} else {
		off = off.Round(time.Millisecond)
	}
	return fmt.Sprintf("this node's clock is %s %s JetStream's (more than nats.max_clock_skew %s): fix its time sync (chrony/NTP); until then it campaigns for no bot and runs no task",
		off, dir, w.Max), true
}
