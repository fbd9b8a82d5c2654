package config

import (
	"fmt"
	"strconv"
	"time"
)

// Health shapes the detection of a bot that is not fine (pkg/heal/health).
type Health struct {
	// RecordInterval: how often the leader writes its bot's last inbound,
	// outbound success and probe times. Default 5s; it bounds how stale an
	// incident's "dropped" time is when a leader vanishes.
	RecordInterval time.Duration `yaml:"record_interval"`
	// ProbeTimeout bounds one probe; ProbeEvery spaces the probes a
	// suspicion asks for. Defaults 3s and 5s: a dead link without a FIN is
	// found about ack timeout + probe timeout after its first failed frame.
	ProbeTimeout time.Duration `yaml:"probe_timeout"`
	ProbeEvery   time.Duration `yaml:"probe_every"`
	// Refute: a frame acked this recently refutes a silence alarm (a
	// baseline problem, recorded, not an incident). Default 10s.
	Refute time.Duration `yaml:"refute"`
	// Silence: alarm after SilenceFactor mean gaps of the bot's traffic at
	// this hour of the week (default 7: about a 1-in-1000 false alarm per
	// silence for steady traffic), never below SilenceFloor (default 5s),
	// and only once the hour of the week has SilenceMinWatched of
	// observation (default 10m) and SilenceMinEvents events (default 20).
	SilenceFactor     float64       `yaml:"silence_factor"`
	SilenceFloor      time.Duration `yaml:"silence_floor"`
	SilenceMinWatched time.Duration `yaml:"silence_min_watched"`
	SilenceMinEvents  int           `yaml:"silence_min_events"`
}

// Recovery shapes half-open recovery after an outage (pkg/heal/recovery).
type Recovery struct {
	// Threshold: outages at least this long go through half-open (a plain
	// handover is shorter), and, without a history source, page a person
	// about their gap (a shorter one only marks the conversations active
	// around it). Default 30s.
	Threshold time.Duration `yaml:"threshold"`
	// Probes heartbeat probes, ProbeInterval apart. Defaults 5 and 1s.
	Probes        int           `yaml:"probes"`
	ProbeInterval time.Duration `yaml:"probe_interval"`
	// CanaryChat, if set, is an internal conversation (a user id; a group
	// chat id with CanaryGroup) pushed once before any customer's backlog.
	CanaryChat  string `yaml:"canary_chat"`
	CanaryGroup bool   `yaml:"canary_group"`
	// Observe is the observation window. Default 5m.
	Observe time.Duration `yaml:"observe"`
	// DrainFactor is the share of the bot's normal push rate the backlog
	// drains at while observing. Default 0.5.
	DrainFactor float64 `yaml:"drain_factor"`
}

func healthDefaults() (Health, Recovery) {
	return Health{RecordInterval: 5 * time.Second, ProbeTimeout: 3 * time.Second, ProbeEvery: 5 * time.Second, Refute: 10 * time.Second,
			SilenceFactor: 7, SilenceFloor: 5 * time.Second, SilenceMinWatched: 10 * time.Minute, SilenceMinEvents: 20},
		Recovery{Threshold: 30 * time.Second, Probes: 5, ProbeInterval: time.Second, Observe: 5 * time.Minute, DrainFactor: 0.5}
}

func float(f func(*Config) *float64) func(*Config, string) error {
	return func(c *Config, s string) error {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", s)
		}
		*f(c) = v
		return nil
	}
}

func boolean(f func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, s string) error {
		v, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not true or false", s)
		}
		*f(c) = v
		return nil
	}
}

var healthKeys = []Key{
	{Name: "backfill.audit_every", Flag: "backfill-audit-every", Usage: "how often a leader reads the history since its last read for messages no connection got", set: dur(func(c *Config) *time.Duration { return &c.Backfill.AuditEvery })},
	{Name: "backfill.rate", Flag: "backfill-rate", Usage: "missed messages a backfill pass hands to compute per second", set: float(func(c *Config) *float64 { return &c.Backfill.Rate })},
	{Name: "push.replay_expiry", Flag: "push-replay-expiry", Usage: "an answer owed by push this long after it was computed is not sent late (a person is told)", set: dur(func(c *Config) *time.Duration { return &c.Push.ReplayExpiry })},
	{Name: "health.record_interval", Flag: "health-record-interval", Usage: "how often the leader writes its bot's health timestamps", set: dur(func(c *Config) *time.Duration { return &c.Health.RecordInterval })},
	{Name: "health.probe_timeout", Flag: "health-probe-timeout", Usage: "how long a health probe waits for its ack", set: dur(func(c *Config) *time.Duration { return &c.Health.ProbeTimeout })},
	{Name: "health.probe_every", Flag: "health-probe-every", Usage: "at most one probe per this while a signal looks wrong", set: dur(func(c *Config) *time.Duration { return &c.Health.ProbeEvery })},
	{Name: "health.refute", Flag: "health-refute", Usage: "a frame acked this recently refutes a silence alarm", set: dur(func(c *Config) *time.Duration { return &c.Health.Refute })},
	{Name: "health.silence_factor", Flag: "health-silence-factor", Usage: "silence alarm after this many mean gaps of the bot's traffic", set: float(func(c *Config) *float64 { return &c.Health.SilenceFactor })},
	{Name: "health.silence_floor", Flag: "health-silence-floor", Usage: "never a silence alarm below this", set: dur(func(c *Config) *time.Duration { return &c.Health.SilenceFloor })},
	{Name: "health.silence_min_watched", Flag: "health-silence-min-watched", Usage: "observation an hour of the week needs before silence alarms", set: dur(func(c *Config) *time.Duration { return &c.Health.SilenceMinWatched })},
	{Name: "health.silence_min_events", Flag: "health-silence-min-events", Usage: "events an hour of the week needs before silence alarms", set: integer(func(c *Config) *int { return &c.Health.SilenceMinEvents })},
	{Name: "recovery.threshold", Flag: "recovery-threshold", Usage: "outages at least this long recover half-open", set: dur(func(c *Config) *time.Duration { return &c.Recovery.Threshold })},
	{Name: "recovery.probes", Flag: "recovery-probes", Usage: "heartbeat probes before the backlog, half-open", set: integer(func(c *Config) *int { return &c.Recovery.Probes })},
	{Name: "recovery.probe_interval", Flag: "recovery-probe-interval", Usage: "gap between half-open probes", set: dur(func(c *Config) *time.Duration { return &c.Recovery.ProbeInterval })},
	{Name: "recovery.canary_chat", Flag: "recovery-canary-chat", Usage: "internal conversation pushed once before the backlog (\"\" none)", set: str(func(c *Config) *string { return &c.Recovery.CanaryChat })},
	{Name: "recovery.canary_group", Flag: "recovery-canary-group", Usage: "recovery.canary_chat is a group chat id", set: boolean(func(c *Config) *bool { return &c.Recovery.CanaryGroup })},
	{Name: "recovery.observe", Flag: "recovery-observe", Usage: "half-open observation window", set: dur(func(c *Config) *time.Duration { return &c.Recovery.Observe })},
	{Name: "recovery.drain_factor", Flag: "recovery-drain-factor", Usage: "share of the normal push rate the backlog drains at, half-open", set: float(func(c *Config) *float64 { return &c.Recovery.DrainFactor })},
}

func init() { Keys = append(Keys, healthKeys...) }

// validateHealth checks the health and recovery keys.
func (c *Config) validateHealth(bad func(key, format string, args ...any)) {
	positive := func(key string, d time.Duration) {
		if d <= 0 {
			bad(key, "must be positive, got %s", d)
		}
	}
	h, r := c.Health, c.Recovery
	positive("push.replay_expiry", c.Push.ReplayExpiry)
	positive("backfill.audit_every", c.Backfill.AuditEvery)
	if c.Backfill.Rate <= 0 {
		bad("backfill.rate", "must be positive (messages per second), got %g", c.Backfill.Rate)
	}
	positive("health.record_interval", h.RecordInterval)
	positive("health.probe_timeout", h.ProbeTimeout)
	positive("health.probe_every", h.ProbeEvery)
	positive("health.refute", h.Refute)
	positive("health.silence_floor", h.SilenceFloor)
	positive("health.silence_min_watched", h.SilenceMinWatched)
	positive("recovery.threshold", r.Threshold)
	positive("recovery.probe_interval", r.ProbeInterval)
	positive("recovery.observe", r.Observe)
	if h.SilenceFactor < 1 {
		bad("health.silence_factor", "must be at least 1 (mean gaps of traffic), got %g", h.SilenceFactor)
	}
	if h.SilenceMinEvents < 1 {
		bad("health.silence_min_events", "must be at least 1, got %d", h.SilenceMinEvents)
	}
	if h.ProbeTimeout > h.ProbeEvery {
		bad("health.probe_timeout", "%s is longer than health.probe_every %s: probes would overlap", h.ProbeTimeout, h.ProbeEvery)
	}
	if r.Probes < 1 || r.Probes > 100 {
		bad("recovery.probes", "want 1-100, got %d", r.Probes)
	}
	if r.DrainFactor <= 0 || r.DrainFactor > 1 {
		bad("recovery.drain_factor", "want a share in (0, 1], got %g", r.DrainFactor)
	}
}
