// Package recovery brings a bot back carefully after an outage: half-open.
//
// A bot that was away longer than Config.Threshold (a plain leader
// handover is shorter and skips this) does not go back to full speed at
// once. In order:
//
//  1. Probing: only low-risk actions: Config.Probes heartbeat probes, each
//     acked, Config.ProbeInterval apart, then one push to the internal
//     canary conversation if one is configured (never a customer's message
//     as a probe). The backlog (complete answers owed by push) is held.
//  2. Observing, for Config.Observe: the backlog drains at no more than
//     Config.DrainFactor (one half) of the bot's normal rate, learnt from
//     its own traffic (never below MinDrainRate, so a quiet bot drains).
//     A connection that fails meanwhile ends the recovery; the next
//     connection starts it again.
//  3. Online: the gate opens.
//
// Live conversation (receipts and streamed replies to new messages) is not
// held: it is what the user is waiting for, and replies count against the
// same per-conversation quota the pusher already paces.
package recovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/wecom"
	"golang.org/x/time/rate"
)

// Config shapes a half-open recovery. Zero values take the defaults named.
type Config struct {
	// Threshold: outages at least this long go through half-open. Default
	// 30s. Lower is more careful after short blips; higher lets more
	// outages resume at full speed.
	Threshold time.Duration
	// Probes heartbeat probes, ProbeInterval apart, must each be acked.
	// Defaults 5 and 1s.
	Probes        int
	ProbeInterval time.Duration
	// Canary, if set, is an internal conversation (a user id, or a group
	// chat id with CanaryGroup) that gets one push before any customer's
	// backlog is sent. Empty: no canary push.
	Canary      string
	CanaryGroup bool
	// CanaryText is the canary's content. Default "botctl canary: recovery probe".
	CanaryText string
	// Observe is the observation window after the probes. Default 5m.
	Observe time.Duration
	// DrainFactor is the share of the normal rate the backlog drains at
	// while observing. Default 0.5. MinDrainRate (pushes/s) is the floor.
	// Default 1.
	DrainFactor  float64
	MinDrainRate float64
	// Clock is what the probes' spacing and the observation wait on, and
	// what Result's Observed and Online are read from. Default
	// clock.Real.
	Clock clock.Clock
}

func (c *Config) setDefaults() {
	if c.Threshold <= 0 {
		c.Threshold = 30 * time.Second
	}
	if c.Probes <= 0 {
		c.Probes = 5
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = time.Second
	}
	if c.CanaryText == "" {
		c.CanaryText = "botctl canary: recovery probe"
	}
	if c.Observe <= 0 {
		c.Observe = 5 * time.Minute
	}
	if c.DrainFactor <= 0 || c.DrainFactor > 1 {
		c.DrainFactor = 0.5
	}
	if c.MinDrainRate <= 0 {
		c.MinDrainRate = 1
	}
}

// Defaults returns c with every zero field at its default.
func (c Config) Defaults() Config {
	c.setDefaults()
	return c
}

// Phase is where a bot's recovery is.
type Phase string

const (
	PhaseOnline    Phase = "online"    // not recovering: no gate
	PhaseProbing   Phase = "probing"   // backlog held
	PhaseObserving Phase = "observing" // backlog drains below the normal rate
)

// Gate is one bot's backlog gate, shared by the recovery and the pusher.
// The zero Gate is open. It is safe for concurrent use.
type Gate struct {
	mu      sync.Mutex
	phase   Phase
	limiter *rate.Limiter
	// latest is the latest time a push asked at (Wait). The pusher's
	// steps run at once and each asks with the time it began, so asks
	// come out of order; rate.Limiter moves its clock back to an earlier
	// ask's time, and the next push then went early (the drain ran faster
	// than its rate). An earlier ask is taken as asked at latest.
	latest time.Time
}

// Phase reports the gate's phase.
func (g *Gate) Phase() Phase {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.phase == "" {
		return PhaseOnline
	}
	return g.phase
}

func (g *Gate) set(p Phase, limit float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.phase = p
	g.limiter = nil
	if p == PhaseObserving {
		g.limiter = rate.NewLimiter(rate.Limit(limit), 1)
	}
}

// holdRetry is how soon a held push asks again.
const holdRetry = time.Second

// Wait is the pusher's question before a backlog push at now: how long to
// wait first (0: go). While observing, a 0 answer takes one token.
func (g *Gate) Wait(now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Before(g.latest) {
		now = g.latest
	}
	g.latest = now
	switch g.phase {
	case PhaseProbing:
		return holdRetry
	case PhaseObserving:
		r := g.limiter.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return d
		}
		return 0
	}
	return 0
}

// Conn is what a recovery uses of a connection.
type Conn interface {
	Probe(ctx context.Context, timeout time.Duration) error
	SendMarkdown(ctx context.Context, chatID string, chatType int, content string) error
	Done() <-chan struct{}
}

// Result is what a recovery did.
type Result struct {
	Probes      int           `json:"probes"`       // acked
	Canary      bool          `json:"canary"`       // the canary push was acked
	DrainRate   float64       `json:"drain_rate"`   // pushes/s while observing
	Observed    time.Duration `json:"observed"`     //
	Online      time.Time     `json:"online"`       // zero if it did not get there
	FailedProbe string        `json:"failed_probe"` // why probing failed, if it did
}

// ErrProbeFailed: a probe or the canary push failed: the connection is not
// fit for customers' traffic.
var ErrProbeFailed = errors.New("recovery: probe failed")

// HalfOpen runs the sequence on conn. normalRate is the bot's normal
// outbound rate (pushes/s); note hears each step for the incident's
// timeline. It returns when the bot is online, the connection ends, or ctx
// ends; the gate is open again whenever it returns.
func HalfOpen(ctx context.Context, cfg Config, conn Conn, g *Gate, normalRate float64, note func(string)) (Result, error) {
	cfg.setDefaults()
	clk := clock.Or(cfg.Clock)
	defer g.set(PhaseOnline, 0)
	g.set(PhaseProbing, 0)
	var res Result
	note(fmt.Sprintf("half-open: %d probes %s apart before any customer's backlog", cfg.Probes, cfg.ProbeInterval))
	for i := 0; i < cfg.Probes; i++ {
		if i > 0 && !sleep(ctx, clk, conn.Done(), cfg.ProbeInterval) {
			return res, context.Cause(ctx)
		}
		if err := conn.Probe(ctx, 0); err != nil {
			res.FailedProbe = err.Error()
			return res, fmt.Errorf("%w: probe %d of %d: %v", ErrProbeFailed, i+1, cfg.Probes, err)
		}
		res.Probes++
	}
	if cfg.Canary != "" {
		chatType := wecom.ChatTypeSingle
		if cfg.CanaryGroup {
			chatType = wecom.ChatTypeGroup
		}
		if err := conn.SendMarkdown(ctx, cfg.Canary, chatType, cfg.CanaryText); err != nil {
			res.FailedProbe = "canary push: " + err.Error()
			return res, fmt.Errorf("%w: canary push to %s: %v", ErrProbeFailed, cfg.Canary, err)
		}
		res.Canary = true
	}
	res.DrainRate = max(normalRate*cfg.DrainFactor, cfg.MinDrainRate)
	g.set(PhaseObserving, res.DrainRate)
	note(fmt.Sprintf("half-open: %d probes acked, canary %v; observing for %s, backlog drains at %.2f pushes/s", res.Probes, res.Canary, cfg.Observe, res.DrainRate))
	start := clk.Now()
	if !sleep(ctx, clk, conn.Done(), cfg.Observe) {
		res.Observed = clk.Since(start)
		return res, errors.New("recovery: connection ended while observing")
	}
	res.Observed = clk.Since(start)
	res.Online = clk.Now().UTC()
	note(fmt.Sprintf("online after half-open (observed %s)", res.Observed.Round(time.Second)))
	return res, nil
}

// sleep waits d on clk; false if ctx or done ended first.
func sleep(ctx context.Context, clk clock.Clock, done <-chan struct{}, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-done:
		return false
	case <-t.C():
		return true
	}
}
