package health

import (
	"context"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/heal/recovery"
	"github.com/rs/zerolog"
)

// Config configures a node's Health. Zero values take the defaults named.
type Config struct {
	NodeID string
	// Owners names who answers for each bot (bots[].owner), for incidents
	// and alerts.
	Owners map[string]string
	// Limits shape the silence baseline; Location is its clock for the
	// hour of the week. Default time.Local.
	Limits   BaselineLimits
	Location *time.Location
	// Tick is the monitor's period. Default 1s.
	Tick time.Duration
	// RecordInterval is how often the leader writes its bot's timestamps
	// (last inbound, outbound success, probe) into the record; state
	// changes are written at once. Default 5s. It bounds how stale
	// Dropped can be when a leader vanishes.
	RecordInterval time.Duration
	// ProbeTimeout bounds one probe; ProbeEvery spaces the probes a
	// suspicion asks for. Defaults 3s and 5s.
	ProbeTimeout, ProbeEvery time.Duration
	// Refute: an outbound frame acked this recently refutes a silence
	// alarm (a baseline problem). Default 10s.
	Refute time.Duration
	// Recovery shapes the half-open recovery after an outage longer than
	// Recovery.Threshold. Without a history source, an outage that long
	// also pages a person about its unchecked gap.
	Recovery recovery.Config
	// Backfill reads the bots' message history. Its Pass runs the gap
	// backfill of a term's bot (every term, at its start, and again when a
	// silent connection delivers again) and returns what it did; its
	// Missed decides whether a silence is a deaf connection or quiet users
	// (see Backfiller). Nil, or ErrNoHistory from either: no history
	// source; an outage's gap is then marked and told, not filled, and the
	// outbound signal judges a silence (see Refute).
	Backfill Backfiller
	// Overlap: after an incident, Backfill's Pass runs once more at
	// recovered + Overlap (the reconciled range ends there). Default 0: no
	// trailing pass; serve sets backfill.overlap.
	Overlap time.Duration
	// StatusLineEvery and StreamWindow are the pusher's (push.heartbeat,
	// push.stream_window): a stream shows a status line after
	// StatusLineEvery without a frame, while its window lasts. They count
	// the status lines an outage's streams were owed and never got
	// (incident.Replay.DroppedStatusLines). Defaults 20s and 6m, the
	// pusher's.
	StatusLineEvery, StreamWindow time.Duration
	// Metrics hears of each incident this node closes, once, with its
	// spans (botctl_incident_seconds). Nil: none.
	Metrics IncidentMetrics
	// Now is the clock of every time Health records (detection, incident
	// steps, marks); a test seam. Default time.Now.
	Now    func() time.Time
	Logger zerolog.Logger
	// Clock is what the monitor's tick and the waits for replays, the
	// trailing pass, a handover's record and an acknowledgement wait on,
	// and the half-open recovery's unless Recovery has its own. Default
	// clock.Real.
	Clock clock.Clock
}

// Backfiller reads a bot's message history to find and answer what no connection received.
type Backfiller interface {
	// Pass runs the gap backfill of term's bot (at the start of every term, and when a silent connection delivers again).
	Pass(ctx context.Context, term *election.Term) (backfill.Report, error)
	// Missed counts bot's messages created in [since, until) that were never handled.
	Missed(ctx context.Context, bot string, since, until time.Time) (int, error)
}

func (c *Config) setDefaults() {
	if c.Location == nil {
		c.Location = time.Local
	}
	if c.Tick <= 0 {
		c.Tick = time.Second
	}
	if c.RecordInterval <= 0 {
		c.RecordInterval = 5 * time.Second
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = 3 * time.Second
	}
	if c.ProbeEvery <= 0 {
		c.ProbeEvery = 5 * time.Second
	}
	if c.Refute <= 0 {
		c.Refute = 10 * time.Second
	}
	if c.StatusLineEvery <= 0 {
		c.StatusLineEvery = 20 * time.Second
	}
	if c.StreamWindow <= 0 {
		c.StreamWindow = 6 * time.Minute
	}
	c.Recovery = c.Recovery.Defaults()
	c.Limits.setDefaults()
	if c.Now == nil {
		c.Now = clock.Or(c.Clock).Now
	}
}

// ErrNoHistory, returned by a Backfiller's Pass or Missed, says no history
// source is configured: an outage's gap is marked and told instead of
// filled, and the outbound signal judges a silence.
var ErrNoHistory = backfill.ErrNoHistory

// IncidentMetrics is told of each incident this node closes, once: its
// bot, kind (outage, data, ai), and T1, T2, T3 (0 where the incident has
// no such span: a data incident is never down).
type IncidentMetrics interface {
	IncidentClosed(bot, kind string, t1, t2, t3 time.Duration)
}
