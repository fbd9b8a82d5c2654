package alert

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/heal/incident"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// ErrRunning is returned by Run while another Run of the same Alerter is
// in progress.
var ErrRunning = errors.New("alerter already running")

// errSent: the incident records the alert already (another alerter, or
// this one before a restart, sent it).
var errSent = errors.New("alert already sent")

// Alerter decides which alerts the incidents call for and sends them.
// Run it on one node (RunElected); a second one running by mistake at
// the same time does not double an alert (see the package comment).
type Alerter struct {
	cfg   Config
	store *incident.Store
	log   zerolog.Logger
	c     counters

	running atomic.Bool
}

// New is an alerter over the incidents of store, with cfg (validated:
// an error wrapping ErrConfig names the field).
func New(store *incident.Store, cfg Config) (*Alerter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: no incident store", ErrConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Alerter{cfg: cfg, store: store, log: cfg.Logger.With().Str("node", cfg.NodeID).Str("component", "alerter").Logger()}, nil
}

// Stats counts deliveries since New (all sinks together).
func (a *Alerter) Stats() Stats {
	return Stats{Sent: a.c.sent.Load(), GivenUp: a.c.givenUp.Load(), Dropped: a.c.dropped.Load(), Retries: a.c.retries.Load()}
}

// Run watches the incidents bucket and sends the alerts they call for
// until ctx ends; it then lets queued alerts go out for at most
// Config.Timeout and returns nil. Each alert is recorded in its
// incidents (incident.Sent) before it is queued, with a compare-and-set,
// so a restarted or newly elected alerter never repeats one. An error
// is returned when the watch itself fails.
func (a *Alerter) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer a.running.Store(false)

	// Sends outlive ctx by at most Timeout: alerts recorded as sent
	// should reach their sinks even when the term ends.
	sendCtx, stopSends := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSends()
	l := &loop{a: a, cfg: &a.cfg, log: a.log, incs: map[string]*incident.Incident{}, warned: map[string]time.Time{}}
	for _, s := range a.cfg.Sinks {
		o := newOutbox(s, &a.cfg, a.log, &a.c)
		o.start(sendCtx)
		l.boxes = append(l.boxes, o)
	}
	defer func() {
		t := clock.Or(a.cfg.Clock).AfterFunc(a.cfg.Timeout, stopSends)
		for _, o := range l.boxes {
			o.stop()
		}
		t.Stop()
	}()

	if err := l.loadSynthetic(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	w, err := a.store.KV().Watch(ctx, incident.WatchFilter)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("watch incidents: %w", err)
	}
	defer w.Stop()
	a.log.Info().Dur("window", a.cfg.Window).Dur("escalate_after", a.cfg.EscalateAfter).
		Dur("flap_window", a.cfg.FlapWindow).Dur("synthetic", a.cfg.Synthetic).Int("sinks", len(l.boxes)).Msg("alerter running")

	tick := clock.Or(a.cfg.Clock).NewTicker(a.cfg.Tick)
	defer tick.Stop()
	loaded := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("watch incidents: the watch ended")
			}
			if e == nil { // every current incident has been delivered
				loaded = true
				l.evaluate(ctx)
				continue
			}
			l.observe(e)
			// Evaluate once a burst is read: incidents changing together
			// are decided together.
			if loaded && len(w.Updates()) == 0 {
				l.evaluate(ctx)
			}
		case <-tick.C():
			if loaded {
				l.evaluate(ctx)
			}
		}
	}
}

// loop is the state of one Run: the incidents seen and the sinks.
type loop struct {
	a     *Alerter
	cfg   *Config
	log   zerolog.Logger
	boxes []*outbox
	incs  map[string]*incident.Incident // by KV key
	// warned: when "not recorded" was last logged, by alert id.
	warned map[string]time.Time

	synthAt  time.Time // when the last synthetic alert was sent (any node)
	synthRev uint64    // revision of its record; 0 = none yet
}

func (l *loop) observe(e natsjs.KeyValueEntry) {
	if e.Operation() != natsjs.KeyValuePut {
		delete(l.incs, e.Key())
		return
	}
	inc, err := incident.Decode(e)
	if err != nil {
		l.log.Warn().Err(err).Str("key", e.Key()).Msg("incident skipped")
		return
	}
	l.keep(inc)
}

// keep stores inc unless a later revision is known already.
func (l *loop) keep(inc *incident.Incident) {
	k := incident.Key(inc.Bot, inc.ID)
	if cur, ok := l.incs[k]; ok && cur.Rev > inc.Rev {
		return
	}
	l.incs[k] = inc
}

// evaluate sends what the incidents call for at the current time.
func (l *loop) evaluate(ctx context.Context) {
	now := l.cfg.Now().UTC()
	for _, p := range decide(now, l.cfg, l.incs) {
		if ctx.Err() != nil {
			return
		}
		l.emit(ctx, now, p)
	}
	l.prune(now)
	l.synthetic(ctx, now)
}

// emit records p's alert in each of its incidents, then queues it to
// every sink. An incident that records it already (another alerter came
// first) is left out; if none is left, nothing is sent.
func (l *loop) emit(ctx context.Context, now time.Time, p plan) {
	var kept []*incident.Incident
	for _, inc := range p.incs {
		cur, err := l.a.store.Update(ctx, inc.Bot, inc.ID, func(i *incident.Incident) error {
			if i.Alerted(string(p.kind)) {
				return errSent
			}
			i.Alerts = append(i.Alerts, incident.Sent{Kind: string(p.kind), Level: p.level, At: now, ID: p.id})
			return nil
		})
		if cur != nil {
			l.keep(cur)
		}
		switch {
		case errors.Is(err, errSent):
			continue
		case err != nil:
			// Decided again at the next evaluation (every Tick): warn once
			// a minute, not at every try, while NATS is away.
			if last, ok := l.warned[p.id]; !ok || now.Sub(last) >= time.Minute || now.Before(last) {
				l.warned[p.id] = now
				l.log.Warn().Err(err).Str("bot", inc.Bot).Str("incident", inc.ID).Str("kind", string(p.kind)).Msg("alert not recorded; will retry")
			}
			continue
		}
		kept = append(kept, cur)
	}
	if len(kept) == 0 {
		return
	}
	delete(l.warned, p.id)
	p.incs = kept // the id stays: it is what the incidents record
	l.send(p.alert(now, l.cfg))
}

// send queues al to every sink subscribed to its level.
func (l *loop) send(al Alert) {
	ev := l.log.Info().Str("alert", al.ID).Str("kind", string(al.Kind)).Str("alert_level", string(al.Level)).Int("instances", len(al.Instances))
	bots := make([]string, 0, len(al.Instances))
	for _, in := range al.Instances {
		if !slices.Contains(bots, in.Bot) {
			bots = append(bots, in.Bot)
		}
	}
	if len(bots) == 1 {
		ev = ev.Str("bot", bots[0])
	} else if len(bots) > 1 {
		ev = ev.Strs("bots", bots)
	}
	if len(al.Instances) == 1 {
		ev = ev.Str("incident", al.Instances[0].Incident)
	}
	ev.Msg("alert raised")
	for _, o := range l.boxes {
		if o.levels.wants(al) {
			o.enqueue(al)
		}
	}
}

// prune forgets closed incidents no rule can still need.
func (l *loop) prune(now time.Time) {
	keep := max(staleAfter, 2*l.cfg.FlapWindow+l.cfg.Window)
	for k, inc := range l.incs {
		if inc.State == incident.Closed && !inc.Closed.IsZero() && now.Sub(inc.Closed) > keep {
			delete(l.incs, k)
		}
	}
}
