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
//     connection starts it again. WeCom's quota is heard meanwhile: a
//     look (every Config.QuotaCheck) that finds frames refused with 45009
//     halves the drain rate, and the Config.QuotaStrikes-th such look
//     fails the window: the backlog is held again for Config.QuotaHold
//     and the sequence starts over from the probes, at the halved rate,
//     on the same connection (the connection is fine: the quota is
//     WeCom's, and a new connection would not reset it).
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
	// QuotaCheck is how often the observation looks for frames refused
	// with 45009 (the connection's Vitals.RateLimited). Default 1s:
	// refusals found in one look are one strike (frames in flight
	// together are refused together). QuotaStrikes is the strike that
	// fails the window (default 2: the first halves the rate, the second
	// fails). QuotaHold is how long the backlog is held after a failed
	// window before the probes start over. Default 1m, WeCom's quota
	// being counted per minute.
	QuotaCheck   time.Duration
	QuotaStrikes int
	QuotaHold    time.Duration
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
	if c.QuotaCheck <= 0 {
		c.QuotaCheck = time.Second
	}
	if c.QuotaStrikes <= 0 {
		c.QuotaStrikes = 2
	}
	if c.QuotaHold <= 0 {
		c.QuotaHold = time.Minute
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

// slow sets the drain rate of an observing gate to limit.
func (g *Gate) slow(limit float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.limiter == nil:
	case g.latest.IsZero(): // nothing asked yet: a fresh limiter
		g.limiter = rate.NewLimiter(rate.Limit(limit), 1)
	default:
		g.limiter.SetLimitAt(g.latest, rate.Limit(limit))
	}
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
	// Vitals are the connection's signs of life; the observation reads
	// RateLimited.
	Vitals() wecom.Vitals
}

// Result is what a recovery did.
type Result struct {
	Probes      int           `json:"probes"`       // acked
	Canary      bool          `json:"canary"`       // the canary push was acked
	DrainRate   float64       `json:"drain_rate"`   // pushes/s while observing
	Observed    time.Duration `json:"observed"`     //
	Online      time.Time     `json:"online"`       // zero if it did not get there
	FailedProbe string        `json:"failed_probe"` // why probing failed, if it did
	// QuotaStrikes counts the observation's looks that found frames
	// refused with 45009; FailedWindows the windows they failed.
	QuotaStrikes  int `json:"quota_strikes,omitempty"`
	FailedWindows int `json:"failed_windows,omitempty"`
}

// ErrProbeFailed: a probe or the canary push failed: the connection is not
// fit for customers' traffic.
var ErrProbeFailed = errors.New("recovery: probe failed")

// HalfOpen runs the sequence on conn. normalRate is the bot's normal
// outbound rate (pushes/s); note hears each step for the incident's
// timeline. It returns when the bot is online, the connection ends, a
// probe fails, or ctx ends; the gate is open again whenever it returns.
func HalfOpen(ctx context.Context, cfg Config, conn Conn, g *Gate, normalRate float64, note func(string)) (Result, error) {
	cfg.setDefaults()
	clk := clock.Or(cfg.Clock)
	defer g.set(PhaseOnline, 0)
	var res Result
	res.DrainRate = max(normalRate*cfg.DrainFactor, cfg.MinDrainRate)
	for {
		g.set(PhaseProbing, 0)
		if err := probe(ctx, cfg, clk, conn, &res, note); err != nil {
			return res, err
		}
		g.set(PhaseObserving, res.DrainRate)
		note(fmt.Sprintf("half-open: %d probes acked, canary %v; observing for %s, backlog drains at %.2f pushes/s", res.Probes, res.Canary, cfg.Observe, res.DrainRate))
		online, err := observe(ctx, cfg, clk, conn, g, &res, note)
		if err != nil || online {
			return res, err
		}
		res.FailedWindows++
		g.set(PhaseProbing, 0)
		note(fmt.Sprintf("half-open: WeCom refused frames for its quota (45009) %d times: the window failed; backlog held for %s, then probes again at %.2f pushes/s", cfg.QuotaStrikes, cfg.QuotaHold, res.DrainRate))
		if !sleep(ctx, clk, conn.Done(), cfg.QuotaHold) {
			if ctx.Err() != nil {
				return res, context.Cause(ctx)
			}
			return res, errors.New("recovery: connection ended while the backlog was held for the quota")
		}
	}
}

// probe is the low-risk step: the probes, then the canary push.
func probe(ctx context.Context, cfg Config, clk clock.Clock, conn Conn, res *Result, note func(string)) error {
	note(fmt.Sprintf("half-open: %d probes %s apart before any customer's backlog", cfg.Probes, cfg.ProbeInterval))
	res.Probes, res.Canary = 0, false
	for i := 0; i < cfg.Probes; i++ {
		if i > 0 && !sleep(ctx, clk, conn.Done(), cfg.ProbeInterval) {
			return context.Cause(ctx)
		}
		if err := conn.Probe(ctx, 0); err != nil {
			res.FailedProbe = err.Error()
			return fmt.Errorf("%w: probe %d of %d: %v", ErrProbeFailed, i+1, cfg.Probes, err)
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
			return fmt.Errorf("%w: canary push to %s: %v", ErrProbeFailed, cfg.Canary, err)
		}
		res.Canary = true
	}
	return nil
}

// observe waits out the observation window, looking at WeCom's quota
// refusals every QuotaCheck (trial.look decides). true: the window
// passed, the bot is online (res.Online set); false with no error: the
// quota failed the window.
func observe(ctx context.Context, cfg Config, clk clock.Clock, conn Conn, g *Gate, res *Result, note func(string)) (bool, error) {
	start := clk.Now()
	t := trial{rate: res.DrainRate, seen: conn.Vitals().RateLimited}
	for {
		left := cfg.Observe - clk.Since(start)
		if left <= 0 {
			break
		}
		if !sleep(ctx, clk, conn.Done(), min(left, cfg.QuotaCheck)) {
			res.Observed = clk.Since(start)
			return false, errors.New("recovery: connection ended while observing")
		}
		next, v := t.look(conn.Vitals().RateLimited, cfg.QuotaStrikes)
		if v != quotaQuiet {
			res.QuotaStrikes++
			res.DrainRate = next.rate
		}
		switch v {
		case quotaSlowed:
			g.slow(next.rate)
			note(fmt.Sprintf("half-open: WeCom refused %d frames for its quota (45009): backlog drain halved to %.2f pushes/s", next.seen-t.seen, next.rate))
		case quotaFailed:
			res.Observed = clk.Since(start)
			return false, nil
		}
		t = next
	}
	res.Observed = clk.Since(start)
	res.Online = clk.Now().UTC()
	note(fmt.Sprintf("online after half-open (observed %s)", res.Observed.Round(time.Second)))
	return true, nil
}

// trial is an observation window facing WeCom's quota: the drain rate,
// the looks that found refusals, the refusals counted so far.
type trial struct {
	rate    float64
	strikes int
	seen    int64
}

// quotaVerdict is what one look decides.
type quotaVerdict int

const (
	quotaQuiet  quotaVerdict = iota // no new refusal: go on
	quotaSlowed                     // new refusals: drain at half the rate
	quotaFailed                     // the strikes-th look with refusals: the window fails (rate halved for the next)
)

// look is the decision of one look, given the connection's count of
// frames refused with 45009 now. Pure: the table of steps is its test.
func (t trial) look(refused int64, strikes int) (trial, quotaVerdict) {
	if refused <= t.seen {
		return t, quotaQuiet
	}
	t.seen, t.strikes, t.rate = refused, t.strikes+1, t.rate/2
	if t.strikes >= strikes {
		return t, quotaFailed
	}
	return t, quotaSlowed
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
