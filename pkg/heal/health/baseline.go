package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/botctl/botctl/pkg/schema"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Baseline is a bot's inbound traffic by hour of the week, learnt from its
// own callbacks while it was healthy: how many events arrived in how many
// seconds watched. It answers "how long a silence is normal now?".
//
// Traffic is modelled as Poisson within an hour of the week: with rate r,
// a silence of t has probability e^(−r·t). Threshold is Factor mean gaps
// (Factor/r): the default 7 makes a false alarm about a one-in-a-thousand
// event per silence, and each alarm is checked by a probe and by the
// outbound signal before it becomes an incident. An hour of the week with
// less than MinWatched of observation or fewer than MinEvents events has
// no opinion: no silence alarm until the baseline has data.
type Baseline struct {
	Hours [168]Hour `json:"hours"`
	// SendRate is the bot's recent outbound rate (frames acked per second,
	// a moving average while healthy): the "normal rate" half-open drains
	// below.
	SendRate float64 `json:"send_rate"`
	// Routes are the baselines of the bot's routes: wecom.RouteDirect and
	// each group busy enough to keep one (at most MaxRoutes), learnt as
	// Hours is, each from its own callbacks. A server that stops
	// delivering one route while it delivers the others leaves Hours
	// content; the route's own baseline finds it.
	Routes map[string]*RouteBaseline `json:"routes,omitempty"`
}

// RouteBaseline is one route's callbacks by hour of the week.
type RouteBaseline struct {
	Hours [168]Hour `json:"hours"`
}

// MaxRoutes bounds the routes a bot's baseline keeps. A route heard while
// the baseline is full replaces the one with the fewest events, if that
// one has fewer than BaselineLimits.MinEvents in all (not busy enough to
// have an opinion anywhere); otherwise it is not learnt.
const MaxRoutes = 32

// Hour is one hour of the week: events seen in seconds watched.
type Hour struct {
	Events  float64 `json:"events,omitempty"`
	Watched float64 `json:"watched_s,omitempty"`
}

// maxWatched bounds an hour's memory: past it, both counts are halved, so
// the baseline follows a bot whose traffic changes over weeks.
const maxWatched = 4 * 3600.0

// hourOfWeek is t's hour of the week in loc, Monday 00:00 = 0.
func hourOfWeek(t time.Time, loc *time.Location) int {
	t = t.In(loc)
	day := (int(t.Weekday()) + 6) % 7
	return day*24 + t.Hour()
}

// Observe adds events seen during watched, ending at t.
func (b *Baseline) Observe(t time.Time, loc *time.Location, watched time.Duration, events int64) {
	observe(&b.Hours, t, loc, watched, events)
}

// Observe adds events of the route seen during watched, ending at t.
func (r *RouteBaseline) Observe(t time.Time, loc *time.Location, watched time.Duration, events int64) {
	observe(&r.Hours, t, loc, watched, events)
}

// Threshold is Baseline.Threshold for the route.
func (r *RouteBaseline) Threshold(t time.Time, loc *time.Location, l BaselineLimits) (time.Duration, bool) {
	return threshold(&r.Hours, t, loc, l)
}

// total is the route's events over the week.
func (r *RouteBaseline) total() float64 {
	var n float64
	for _, h := range r.Hours {
		n += h.Events
	}
	return n
}

func observe(hours *[168]Hour, t time.Time, loc *time.Location, watched time.Duration, events int64) {
	h := &hours[hourOfWeek(t, loc)]
	h.Events += float64(events)
	h.Watched += watched.Seconds()
	if h.Watched > maxWatched {
		h.Events /= 2
		h.Watched /= 2
	}
}

// ObserveSends folds a sample of the outbound rate into SendRate.
func (b *Baseline) ObserveSends(rate float64) {
	if b.SendRate == 0 {
		b.SendRate = rate
		return
	}
	b.SendRate = 0.9*b.SendRate + 0.1*rate
}

// BaselineLimits say when a baseline has an opinion, and how tight it is.
type BaselineLimits struct {
	Factor     float64       // mean gaps of silence that raise an alarm (default 7)
	Floor      time.Duration // never alarm below this silence (default 5s)
	MinWatched time.Duration // per hour of the week (default 10m)
	MinEvents  float64       // per hour of the week (default 20)
}

func (l *BaselineLimits) setDefaults() {
	if l.Factor <= 0 {
		l.Factor = 7
	}
	if l.Floor <= 0 {
		l.Floor = 5 * time.Second
	}
	if l.MinWatched <= 0 {
		l.MinWatched = 10 * time.Minute
	}
	if l.MinEvents <= 0 {
		l.MinEvents = 20
	}
}

// Threshold is how long a silence at t may last before it is suspicious,
// and false when the baseline has no opinion (not enough data, or no
// traffic is normal at this hour).
func (b *Baseline) Threshold(t time.Time, loc *time.Location, l BaselineLimits) (time.Duration, bool) {
	return threshold(&b.Hours, t, loc, l)
}

func threshold(hours *[168]Hour, t time.Time, loc *time.Location, l BaselineLimits) (time.Duration, bool) {
	l.setDefaults()
	h := hours[hourOfWeek(t, loc)]
	if h.Watched < l.MinWatched.Seconds() || h.Events < l.MinEvents {
		return 0, false
	}
	rate := h.Events / h.Watched
	d := time.Duration(math.Min(l.Factor/rate, 7*24*3600) * float64(time.Second))
	return max(d, l.Floor), true
}

// route returns the baseline of route, admitting it if there is room
// (MaxRoutes, see there); nil: not learnt.
func (b *Baseline) route(key string, l BaselineLimits) *RouteBaseline {
	if r := b.Routes[key]; r != nil {
		return r
	}
	if b.Routes == nil {
		b.Routes = map[string]*RouteBaseline{}
	}
	if len(b.Routes) >= MaxRoutes {
		l.setDefaults()
		weakest, least := "", l.MinEvents
		for k, r := range b.Routes {
			if n := r.total(); n < least || n == least && weakest != "" && k < weakest {
				weakest, least = k, n
			}
		}
		if weakest == "" {
			return nil
		}
		delete(b.Routes, weakest)
	}
	r := &RouteBaseline{}
	b.Routes[key] = r
	return r
}

// clone is a deep copy of b: a snapshot another goroutine may read while
// the monitor learns into b.
func (b *Baseline) clone() Baseline {
	out := *b
	if b.Routes != nil {
		out.Routes = make(map[string]*RouteBaseline, len(b.Routes))
		for k, r := range b.Routes {
			c := *r
			out.Routes[k] = &c
		}
	}
	return out
}

func loadBaseline(ctx context.Context, kv natsjs.KeyValue, bot string) (*Baseline, error) {
	e, err := kv.Get(ctx, baselineKey(bot))
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return &Baseline{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read silence baseline of bot %s: %w", bot, err)
	}
	var b Baseline
	if err := json.Unmarshal(e.Value(), &b); err != nil {
		return &Baseline{}, nil // unreadable: learn again rather than stop
	}
	return &b, nil
}

func saveBaseline(ctx context.Context, kv natsjs.KeyValue, bot string, b *Baseline) error {
	raw, err := schema.Marshal(b)
	if err != nil {
		return err
	}
	// One writer per bot (its leader); a deposed leader's last write is
	// at most a minute of learning, and harmless.
	_, err = kv.Put(ctx, baselineKey(bot), raw)
	return err
}

// LoadBaseline reads bot's saved silence baseline (empty when none is
// saved yet): what its leader learnt, saved about once a minute.
func LoadBaseline(ctx context.Context, kv natsjs.KeyValue, bot string) (*Baseline, error) {
	return loadBaseline(ctx, kv, bot)
}
