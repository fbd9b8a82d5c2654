package alert

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/retry"
	"github.com/rs/zerolog"
)

// Stats counts deliveries, per sink attempt outcome, since New.
type Stats struct {
	Sent    int64 // alerts a sink accepted
	GivenUp int64 // alerts a sink refused for good or failed MaxAttempts times
	Dropped int64 // alerts not queued: the sink's queue was full, or the alerter stopped first
	Retries int64 // attempts after a first failure
}

type counters struct{ sent, givenUp, dropped, retries atomic.Int64 }

// outbox is one sink's bounded queue and the one goroutine that drains it.
type outbox struct {
	sink   Sink
	levels Levels // what the sink subscribed to (Subscribe)
	cfg    *Config
	log    zerolog.Logger
	c      *counters
	q      chan Alert
	wg     sync.WaitGroup
}

func newOutbox(s Sink, cfg *Config, log zerolog.Logger, c *counters) *outbox {
	return &outbox{sink: s, levels: levelsOf(s), cfg: cfg, log: log.With().Str("sink", s.Name()).Logger(), c: c, q: make(chan Alert, cfg.QueueSize)}
}

// start drains the queue until stop; ctx bounds the sends in flight.
func (o *outbox) start(ctx context.Context) {
	o.wg.Go(func() {
		for a := range o.q {
			o.deliver(ctx, a)
		}
	})
}

// enqueue never blocks: a full queue drops the alert, counted and logged.
func (o *outbox) enqueue(a Alert) {
	select {
	case o.q <- a:
	default:
		n := o.c.dropped.Add(1)
		o.log.Error().Str("alert", a.ID).Str("kind", string(a.Kind)).Int64("dropped_total", n).
			Int("queue_size", cap(o.q)).Msg("alert dropped: sink queue full")
	}
}

// stop closes the queue and waits for the goroutine; whatever ctx (given
// to start) no longer allows sending is counted as dropped.
func (o *outbox) stop() {
	close(o.q)
	o.wg.Wait()
}

// deliver tries a up to MaxAttempts times with exponential backoff (each
// wait between half and all of its step: pkg/retry).
func (o *outbox) deliver(ctx context.Context, a Alert) {
	log := o.log.With().Str("alert", a.ID).Str("kind", string(a.Kind)).Str("alert_level", string(a.Level)).Logger()
	if ctx.Err() != nil {
		n := o.c.dropped.Add(1)
		log.Error().Int64("dropped_total", n).Msg("alert dropped: alerter stopped before sending it")
		return
	}
	backoff := retry.New(o.cfg.Backoff, o.cfg.MaxBackoff)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
		err := o.sink.Send(actx, a)
		cancel()
		if err == nil {
			o.c.sent.Add(1)
			log.Info().Int("attempt", attempt).Msg("alert sent")
			return
		}
		if errors.Is(err, ErrPermanent) {
			o.c.givenUp.Add(1)
			log.Error().Err(err).Int("attempt", attempt).Msg("alert given up: refused by the sink")
			return
		}
		if attempt >= o.cfg.MaxAttempts {
			o.c.givenUp.Add(1)
			log.Error().Err(err).Int("attempt", attempt).Msg("alert given up: attempts exhausted")
			return
		}
		wait := backoff.Next()
		log.Warn().Err(err).Int("attempt", attempt).Dur("retry_in", wait).
			Bool("rate_limited", errors.Is(err, ErrRateLimited)).Msg("alert not sent, will retry")
		o.c.retries.Add(1)
		if !clock.Sleep(ctx, o.cfg.Clock, wait) {
			n := o.c.dropped.Add(1)
			log.Error().Int64("dropped_total", n).Msg("alert dropped: alerter stopped while retrying")
			return
		}
	}
}
