package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/retry"
	"github.com/rs/zerolog"
)

// Defaults of ForwarderConfig.
const (
	DefaultForwardMinBackoff = 200 * time.Millisecond
	DefaultForwardMaxBackoff = 10 * time.Second
	DefaultForwardPoll       = 5 * time.Second
)

// ForwarderConfig configures a Forwarder.
type ForwarderConfig struct {
	// Spool to drain. Required.
	Spool *Spool
	// Publish forwards one entry; usually Store.SpoolPublisher. Required.
	Publish Publisher
	// Expiry is how long an entry may wait in the spool: one that waited
	// longer (SpoolEntry.Waited) when JetStream takes tasks again is not
	// forwarded to Publish but handed to Expired, with Publish's contract
	// (nil: done, the entry is deleted; an error keeps it for a later
	// try), to tell its user the message was not answered. An answer that
	// late would answer a question its user has given up on, or asked
	// again. 0: entries never expire.
	Expiry time.Duration
	// Expired takes the expired entries. Required with Expiry.
	Expired Publisher
	// LateAfter: an entry forwarded after waiting longer than this is
	// marked Late, for Publish to have its user told the answer is late.
	// 0: never marked. Below Expiry.
	LateAfter time.Duration
	// MinBackoff is the step of the first retry after a failed drain;
	// each further failure doubles it up to MaxBackoff (each wait is
	// drawn between half and all of its step: pkg/retry). Shorter finds
	// JetStream back sooner but costs a failed publish (up to its timeout)
	// per try. Defaults 200ms and 10s.
	MinBackoff, MaxBackoff time.Duration
	// Poll is how often an idle forwarder looks at the spool by itself.
	// Kick wakes it at once; Poll covers whoever forgets to. Default 5s.
	Poll time.Duration
	// Logger records failed drains (one line per failure streak) and
	// recoveries. The zero value logs nothing.
	Logger zerolog.Logger
	// Clock is what the backoff and the poll wait on. Default clock.Real.
	Clock clock.Clock
}

// Forwarder drains a spool into JetStream whenever JetStream takes tasks
// again. Run it in a goroutine the owner waits for; it ends with its
// context.
type Forwarder struct {
	cfg  ForwarderConfig
	kick chan struct{}
}

// NewForwarder checks cfg and fills its defaults.
func NewForwarder(cfg ForwarderConfig) (*Forwarder, error) {
	if cfg.Spool == nil {
		return nil, errors.New("forwarder: Spool is required")
	}
	if cfg.Publish == nil {
		return nil, errors.New("forwarder: Publish is required")
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = DefaultForwardMinBackoff
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = DefaultForwardMaxBackoff
	}
	if cfg.Poll == 0 {
		cfg.Poll = DefaultForwardPoll
	}
	if cfg.MinBackoff < 0 || cfg.MaxBackoff < cfg.MinBackoff {
		return nil, errors.New("forwarder: need 0 < MinBackoff <= MaxBackoff")
	}
	if cfg.Poll < 0 {
		return nil, errors.New("forwarder: Poll must be positive")
	}
	switch {
	case cfg.Expiry < 0 || cfg.LateAfter < 0:
		return nil, errors.New("forwarder: Expiry and LateAfter must not be negative")
	case cfg.Expiry > 0 && cfg.Expired == nil:
		return nil, errors.New("forwarder: Expired is required with an Expiry (who tells the users of expired entries?)")
	case cfg.Expiry > 0 && cfg.LateAfter >= cfg.Expiry:
		return nil, fmt.Errorf("forwarder: LateAfter %s must be below Expiry %s", cfg.LateAfter, cfg.Expiry)
	}
	return &Forwarder{cfg: cfg, kick: make(chan struct{}, 1)}, nil
}

// Kick wakes the forwarder to drain now: call it after Append, and from
// the NATS connection's reconnect handler. It never blocks; kicks while a
// drain runs coalesce into one more drain.
func (f *Forwarder) Kick() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Run drains the spool at once, then whenever kicked or polled, retrying a
// failed drain with exponential backoff, until ctx ends; then it returns
// nil. A drain in progress sees ctx end too: the entry being published
// stays in the spool. Close the spool only after Run has returned.
func (f *Forwarder) Run(ctx context.Context) error {
	log := f.cfg.Logger
	timer := clock.Or(f.cfg.Clock).NewTimer(0)
	defer timer.Stop()
	backoff, failing := retry.New(f.cfg.MinBackoff, f.cfg.MaxBackoff), false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.kick:
		case <-timer.C():
		}
		n, err := f.cfg.Spool.Drain(ctx, f.publish)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if !failing {
				failing = true
				log.Warn().Err(err).Int("forwarded", n).Msg("spool: JetStream does not take tasks; retrying with backoff")
			}
			resetTimer(timer, backoff.Next())
			continue
		}
		if failing || n > 0 {
			log.Info().Int("forwarded", n).Msg("spool drained")
		}
		failing = false
		backoff.Reset()
		resetTimer(timer, f.cfg.Poll)
	}
}

// publish hands e to Expired if it waited past the expiry, else to
// Publish, marked Late if it waited past LateAfter.
func (f *Forwarder) publish(ctx context.Context, e SpoolEntry) error {
	waited := e.Waited(time.Now())
	if f.cfg.Expiry > 0 && waited > f.cfg.Expiry {
		return f.cfg.Expired.Publish(ctx, e)
	}
	e.Late = f.cfg.LateAfter > 0 && waited > f.cfg.LateAfter
	return f.cfg.Publish.Publish(ctx, e)
}

// resetTimer sets t to fire after d, whatever its state (Go 1.23+ timers
// drop a stale value on Reset).
func resetTimer(t clock.Timer, d time.Duration) {
	t.Stop()
	t.Reset(d)
}
