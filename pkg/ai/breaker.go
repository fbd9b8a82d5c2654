package ai

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// BreakerState is a circuit breaker's state; its value is the metric's
// (botctl_ai_breaker_state).
type BreakerState int

const (
	// Closed: the backend is tried.
	Closed BreakerState = 0
	// HalfOpen: the cool-down is over; one answer probes the backend,
	// the others skip it meanwhile.
	HalfOpen BreakerState = 1
	// Open: the backend failed Failures times in a row and is skipped
	// until the cool-down is over.
	Open BreakerState = 2
)

func (s BreakerState) String() string {
	switch s {
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return "closed"
}

// BreakerPolicy is a breaker's configuration (config.AIBreaker).
type BreakerPolicy struct {
	Failures int           // in a row, to open; 0: never opens
	Cooldown time.Duration // open, before the probe
}

// BreakerWatcher hears of the breakers' changes (the node: its log and
// its incidents). Calls are made outside the breakers' lock, one at a
// time per Breakers, in the order of the changes.
type BreakerWatcher interface {
	// BreakerChanged: bot's breaker of backend is now state; why is the
	// failure that opened it, or what closed it.
	BreakerChanged(bot, backend string, state BreakerState, why string)
	// AllDown: every backend of bot's chain is open (down holds each
	// backend's last failure); Recovered: one of them answered again
	// since.
	AllDown(bot string, down map[string]string)
	Recovered(bot, backend string)
}

// Breakers are one node's circuit breakers, one per bot and backend
// (Name), and its fallback counts. Their state is this node's memory:
// each node learns of a backend's failures from its own answers, and a
// restarted node starts with every breaker closed.
type Breakers struct {
	now     func() time.Time
	watcher BreakerWatcher

	mu        sync.Mutex
	breakers  map[[2]string]*breaker // bot, backend
	down      map[string]bool        // bot → AllDown said, Recovered not yet
	fallbacks map[[3]string]uint64   // bot, from, to → count
	cuts      map[[2]string]uint64   // bot, backend → answers cut
	notify    sync.Mutex             // one watcher call at a time, in order
}

type breaker struct {
	state    BreakerState
	failures int       // in a row
	opened   time.Time // when it last opened
	probing  bool      // half-open: the probe is under way
	last     string    // the last failure
}

// NewBreakers makes a node's breakers; watcher may be nil, now nil
// (time.Now).
func NewBreakers(watcher BreakerWatcher, now func() time.Time) *Breakers {
	if now == nil {
		now = time.Now
	}
	return &Breakers{now: now, watcher: watcher, breakers: map[[2]string]*breaker{}, down: map[string]bool{},
		fallbacks: map[[3]string]uint64{}, cuts: map[[2]string]uint64{}}
}

func (b *Breakers) get(bot, backend string) *breaker {
	k := [2]string{bot, backend}
	br := b.breakers[k]
	if br == nil {
		br = &breaker{}
		b.breakers[k] = br
	}
	return br
}

// allow reports whether bot may ask backend now (a half-open breaker
// lets its one probe through: the caller then owes success, failure or
// release).
func (b *Breakers) allow(bot, backend string, p BreakerPolicy) (ok, probe bool) {
	b.mu.Lock()
	br := b.get(bot, backend)
	switch {
	case br.state == Closed:
		b.mu.Unlock()
		return true, false
	case br.state == Open && b.now().Sub(br.opened) < p.Cooldown:
		b.mu.Unlock()
		return false, false
	case br.state == HalfOpen && br.probing:
		b.mu.Unlock()
		return false, false
	}
	changed := br.state != HalfOpen
	br.state, br.probing = HalfOpen, true
	b.mu.Unlock()
	if changed {
		b.tell(func(w BreakerWatcher) {
			w.BreakerChanged(bot, backend, HalfOpen, "cool-down over: one answer probes it")
		})
	}
	return true, true
}

// success: backend answered (its first token, or a refusal, which is an
// answer too): the breaker closes.
func (b *Breakers) success(bot, backend string) {
	b.mu.Lock()
	br := b.get(bot, backend)
	was := br.state
	br.state, br.failures, br.probing = Closed, 0, false
	recovered := b.down[bot]
	delete(b.down, bot)
	b.mu.Unlock()
	if was != Closed {
		b.tell(func(w BreakerWatcher) { w.BreakerChanged(bot, backend, Closed, "answered") })
	}
	if recovered {
		b.tell(func(w BreakerWatcher) { w.Recovered(bot, backend) })
	}
}

// release ends a probe that said nothing of the backend (the task was
// stopped): the next answer probes instead.
func (b *Breakers) release(bot, backend string, probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	b.get(bot, backend).probing = false
	b.mu.Unlock()
}

// failure counts one failure of backend; chain is every backend of the
// bot's chain, to tell when all of them are open.
func (b *Breakers) failure(bot, backend, why string, p BreakerPolicy, chain []string) {
	b.mu.Lock()
	br := b.get(bot, backend)
	br.failures++
	br.last = why
	br.probing = false
	opened := false
	if p.Failures > 0 && (br.state == HalfOpen || br.state == Closed && br.failures >= p.Failures) {
		br.state, br.opened, opened = Open, b.now(), true
	}
	var down map[string]string
	if opened && !b.down[bot] {
		down = map[string]string{}
		for _, name := range chain {
			o := b.get(bot, name)
			if o.state != Open {
				down = nil
				break
			}
			down[name] = o.last
		}
		if down != nil {
			b.down[bot] = true
		}
	}
	n := br.failures
	b.mu.Unlock()
	if opened {
		b.tell(func(w BreakerWatcher) {
			w.BreakerChanged(bot, backend, Open, fmtFailures(n)+", the last: "+why)
		})
	}
	if down != nil {
		b.tell(func(w BreakerWatcher) { w.AllDown(bot, down) })
	}
}

func fmtFailures(n int) string {
	if n == 1 {
		return "1 failure"
	}
	return strconv.Itoa(n) + " failures in a row"
}

func (b *Breakers) fellBack(bot, from, to string) {
	b.mu.Lock()
	b.fallbacks[[3]string{bot, from, to}]++
	b.mu.Unlock()
}

func (b *Breakers) cut(bot, backend string) {
	b.mu.Lock()
	b.cuts[[2]string{bot, backend}]++
	b.mu.Unlock()
}

func (b *Breakers) tell(fn func(BreakerWatcher)) {
	if b.watcher == nil {
		return
	}
	b.notify.Lock()
	defer b.notify.Unlock()
	fn(b.watcher)
}

// BreakerView is one breaker now, for metrics and status.
type BreakerView struct {
	Bot, Backend string
	State        BreakerState
	Failures     int // in a row
}

// FallbackCount is how many answers of Bot went from From to To (To
// "none": no backend was left).
type FallbackCount struct {
	Bot, From, To string
	N             uint64
}

// CutCount is how many answers of Bot were cut by Backend failing after
// its first token.
type CutCount struct {
	Bot, Backend string
	N            uint64
}

// Snapshot is every breaker, fallback count and cut count, sorted.
func (b *Breakers) Snapshot() ([]BreakerView, []FallbackCount, []CutCount) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var vs []BreakerView
	for k, br := range b.breakers {
		vs = append(vs, BreakerView{Bot: k[0], Backend: k[1], State: br.state, Failures: br.failures})
	}
	slices.SortFunc(vs, func(x, y BreakerView) int { return strings.Compare(x.Bot+"\x00"+x.Backend, y.Bot+"\x00"+y.Backend) })
	var fs []FallbackCount
	for k, n := range b.fallbacks {
		fs = append(fs, FallbackCount{Bot: k[0], From: k[1], To: k[2], N: n})
	}
	slices.SortFunc(fs, func(x, y FallbackCount) int {
		return strings.Compare(x.Bot+"\x00"+x.From+"\x00"+x.To, y.Bot+"\x00"+y.From+"\x00"+y.To)
	})
	var cs []CutCount
	for k, n := range b.cuts {
		cs = append(cs, CutCount{Bot: k[0], Backend: k[1], N: n})
	}
	slices.SortFunc(cs, func(x, y CutCount) int { return strings.Compare(x.Bot+"\x00"+x.Backend, y.Bot+"\x00"+y.Backend) })
	return vs, fs, cs
}

// State is bot's breaker of backend now.
func (b *Breakers) State(bot, backend string) BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	if br := b.breakers[[2]string{bot, backend}]; br != nil {
		return br.state
	}
	return Closed
}
