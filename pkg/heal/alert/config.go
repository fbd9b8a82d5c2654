package alert

import (
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/rs/zerolog"
)

// Defaults of Config (see each field for the trade-off).
const (
	DefaultWindow        = 60 * time.Second
	DefaultEscalateAfter = 5 * time.Minute
	DefaultFlapWindow    = 10 * time.Minute
	DefaultSynthetic     = 24 * time.Hour
	DefaultMergeMin      = 2
	DefaultTick          = time.Second
	DefaultMaxAttempts   = 6
	DefaultTimeout       = 10 * time.Second
	DefaultBackoff       = 2 * time.Second
	DefaultMaxBackoff    = time.Minute
	DefaultQueueSize     = 256
	DefaultElectionTTL   = 10 * time.Second
	DefaultPrefix        = etcdkeys.Root + etcdkeys.Alerter

	// SyntheticOff as Config.Synthetic sends no synthetic alert.
	SyntheticOff time.Duration = -1
)

// ErrConfig is wrapped by every error of Config validation; the message
// names the field.
var ErrConfig = errors.New("invalid alert config")

// Config of an Alerter. Zero fields take the defaults above, except Sinks
// (at least one) and NodeID (required).
type Config struct {
	// Window merges outages: automatic (level auto) incidents of
	// MergeMin or more bots detected within Window of the first become
	// one merged alert at level human. An auto incident's open alert
	// waits up to Window for others to join. Default 60s; longer merges
	// more unrelated outages, shorter splits one cause into several
	// alerts. Human incidents never wait.
	Window time.Duration
	// MergeMin is how many distinct bots within Window make a merged
	// alert. Default 2; raise it when many bots make coincidences likely.
	MergeMin int
	// EscalateAfter: an auto incident not recovered this long after its
	// detection is escalated (one alert, level human). Default 5m; must
	// be longer than Window.
	EscalateAfter time.Duration
	// FlapWindow damps a flapping bot: after a bot's open alert, its
	// further incidents detected within FlapWindow are not alerted one by
	// one but folded into one flapping alert at the window's end (and so
	// on, one per window, while it keeps flapping). Default 10m; longer
	// means fewer alerts and a later summary.
	FlapWindow time.Duration
	// Synthetic is the interval of the synthetic alert that runs the
	// whole path (router → every sink). Default 24h; SyntheticOff (any
	// negative value) turns it off: a config key's "0 = off" maps to
	// SyntheticOff, since a zero field takes the default.
	Synthetic time.Duration
	// Sinks receive every alert of the levels they subscribe to
	// (Subscribe; every level by default). At least one.
	Sinks []Sink
	// Owners names who answers for a bot when its incident has no Owner.
	Owners map[string]string
	// NodeID names this node in logs, on synthetic alerts and in etcd.
	NodeID string
	// Now is the clock of every time rule. Default time.Now.
	Now func() time.Time
	// Tick is how often the time rules (window, escalation, flapping,
	// synthetic) are checked. Default 1s.
	Tick time.Duration
	// Clock is what the tick, the sinks' retries, the election's retry
	// and the sends' grace at the end wait on. Default clock.Real.
	Clock clock.Clock
	// Logger receives one line per alert sent, retried, given up or
	// dropped. URLs in it are redacted.
	Logger zerolog.Logger
	// Metrics, if set, counts RunElected's failed etcd requests.
	Metrics Metrics

	// Delivery to each sink: up to MaxAttempts attempts (default 6), each
	// bounded by Timeout (default 10s), Backoff doubling between them
	// (default 2s, at most MaxBackoff, default 1m: 6 attempts span about
	// a minute, the WeCom robot's rate window). QueueSize alerts wait per
	// sink (default 256); beyond it alerts are dropped, counted
	// (Stats.Dropped) and logged.
	MaxAttempts int
	Timeout     time.Duration
	Backoff     time.Duration
	MaxBackoff  time.Duration
	QueueSize   int
}

// withDefaults returns cfg with defaults filled in, or an error naming
// the first field that makes no sense.
func (cfg Config) withDefaults() (Config, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.Window, DefaultWindow)
	def(&cfg.EscalateAfter, DefaultEscalateAfter)
	def(&cfg.FlapWindow, DefaultFlapWindow)
	def(&cfg.Synthetic, DefaultSynthetic)
	def(&cfg.Tick, DefaultTick)
	def(&cfg.Timeout, DefaultTimeout)
	def(&cfg.Backoff, DefaultBackoff)
	def(&cfg.MaxBackoff, DefaultMaxBackoff)
	if cfg.MergeMin == 0 {
		cfg.MergeMin = DefaultMergeMin
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	bad := func(field, format string, args ...any) (Config, error) {
		return cfg, fmt.Errorf("%w: %s %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	switch {
	case cfg.NodeID == "":
		return bad("NodeID", "is required")
	case len(cfg.Sinks) == 0:
		return bad("Sinks", "is empty: give at least one sink (NewWeComRobot, NewWebhook)")
	case cfg.Window < 0:
		return bad("Window", "is %s, must be positive", cfg.Window)
	case cfg.EscalateAfter <= cfg.Window:
		return bad("EscalateAfter", "is %s, must be longer than Window (%s)", cfg.EscalateAfter, cfg.Window)
	case cfg.FlapWindow < 0:
		return bad("FlapWindow", "is %s, must be positive", cfg.FlapWindow)
	case cfg.MergeMin < 2:
		return bad("MergeMin", "is %d, must be at least 2", cfg.MergeMin)
	case cfg.Tick < 0:
		return bad("Tick", "is %s, must be positive", cfg.Tick)
	case cfg.MaxAttempts < 1:
		return bad("MaxAttempts", "is %d, must be at least 1", cfg.MaxAttempts)
	case cfg.Timeout < 0:
		return bad("Timeout", "is %s, must be positive", cfg.Timeout)
	case cfg.Backoff < 0 || cfg.MaxBackoff < cfg.Backoff:
		return bad("Backoff", "is %s (MaxBackoff %s): must be positive and at most MaxBackoff", cfg.Backoff, cfg.MaxBackoff)
	case cfg.QueueSize < 1:
		return bad("QueueSize", "is %d, must be at least 1", cfg.QueueSize)
	}
	if cfg.Synthetic > 0 && cfg.Synthetic < cfg.Tick {
		return bad("Synthetic", "is %s, shorter than Tick (%s)", cfg.Synthetic, cfg.Tick)
	}
	for k, s := range cfg.Sinks {
		if s == nil {
			return bad(fmt.Sprintf("Sinks[%d]", k), "is nil")
		}
		for _, l := range levelsOf(s) {
			if l != incident.Auto && l != incident.Human {
				return bad(fmt.Sprintf("Sinks[%d]", k), "subscribes to level %q: use incident.Auto or incident.Human", l)
			}
		}
	}
	return cfg, nil
}

func (cfg *Config) owner(bot, own string) string {
	if own != "" {
		return own
	}
	if o := cfg.Owners[bot]; o != "" {
		return o
	}
	return "(no owner: set bots[].owner)"
}

// Metrics hears of RunElected's failed etcd requests (the node's etcd
// error counter, *metrics.Node).
type Metrics interface {
	// EtcdError is called with the operation ("alert_session",
	// "alert_campaign") each time an etcd request fails: the session's
	// lease not granted, a campaign that failed while ctx is live. A
	// session lost while leading is not a failed request (the keep-alive
	// stopped) and is only logged. Must not block.
	EtcdError(op string)
}
