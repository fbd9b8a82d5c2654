package election

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/rs/zerolog"
)

// Defaults; see Config for what each one trades off.
const (
	// DefaultPrefix is where elections live: bot B's election is
	// concurrency.Election "/botctl/elect/B", its candidates' keys
	// "/botctl/elect/B/<lease hex>".
	DefaultPrefix = etcdkeys.Root + etcdkeys.ElectDir
	// DefaultLegacyPrefix is the old layout's (one key per bot,
	// "/botctl/election/B"), checked so old and new nodes never both lead
	// during a rolling upgrade.
	DefaultLegacyPrefix = etcdkeys.Root + etcdkeys.LegacyElectionDir
	DefaultTTL          = 20 * time.Second
	// DefaultPulsePrefix is where leaders publish their liveness pulse:
	// bot B's is the key "/botctl/pulse/B", bound to the leader's lease.
	DefaultPulsePrefix = etcdkeys.Root + etcdkeys.PulseDir
	// DefaultPulseInterval and DefaultPulseTimeout: a leader bumps its
	// pulse every second; a standby deposes a leader whose pulse has not
	// moved for 3s.
	DefaultPulseInterval = time.Second
	DefaultPulseTimeout  = 3 * time.Second
	// MinPulseInterval bounds the pulse's etcd write rate: one write per
	// led bot per interval.
	MinPulseInterval = 100 * time.Millisecond
	// MinTTL is etcd's smallest lease TTL with its default heartbeat and
	// election timeout (1.5 election timeouts, rounded up to a second).
	MinTTL = 2 * time.Second
)

// Config configures one bot's election on one node. Zero values take the
// defaults; Validate reports unsafe combinations.
type Config struct {
	// Prefix of elections: a bot's election is the concurrency.Election
	// named Prefix+BotID (its candidates' keys are that plus "/" and their
	// lease in hex). Default DefaultPrefix. Every node of a deployment
	// must use the same prefix.
	Prefix string
	// LegacyPrefix is the old layout's prefix: while the key
	// LegacyPrefix+BotID exists, a node of an older botctl leads the bot,
	// and this node does not (Verify fails, a term ends when the key
	// appears). Default DefaultLegacyPrefix. It costs one key in each
	// Verify and one watch per term.
	LegacyPrefix string
	// LeaseFile, if set, is a file where the lease of this node's current
	// candidacy is kept (one file per bot, in the node's data dir): the
	// next Campaign, in this process or the next one after a crash,
	// revokes that lease first, so a standby takes over at once instead of
	// after TTL. Empty: nothing is kept; a crashed leader's lease expires
	// within TTL.
	LeaseFile string
	// BotID names the bot whose connection is elected. Required; must not
	// contain "/".
	BotID string
	// NodeID names this node in the key's value and in logs. Required.
	NodeID string

	// TTL of each candidacy's session lease: after a crash that is not
	// followed by a restart with the same LeaseFile, how long the bot has
	// no leader at most (plus etcd's expiry check, about half a second).
	// Default 20s. Lower means faster failover after a crash but more
	// leadership losses when etcd or the network is slow. Whole seconds,
	// at least MinTTL (etcd's lease unit and minimum).
	TTL time.Duration
	// SafetyMargin is how long before the lease can expire on the server
	// a leader that cannot renew stops acting. Default TTL/4. It must
	// cover the longest process pause (GC, scheduling) and clock-rate
	// difference you want to survive; raising it shortens RenewDeadline.
	SafetyMargin time.Duration
	// RenewDeadline is how long renewal may keep failing, counted from the
	// send time of the last successful renewal, before the Term is
	// cancelled. Default TTL-SafetyMargin, which is also the maximum.
	// Lower makes leaders give up sooner on a slow etcd.
	RenewDeadline time.Duration
	// RenewInterval is how often a leader probes its lease with a renewal
	// of its own (the watchdog counts from these). Default TTL/3. The
	// session renews the lease at TTL/3 too, on its own stream. Must be
	// less than RenewDeadline so at least one more probe is tried before
	// giving up; lower means more chances but more etcd load (one request
	// per led bot per interval).
	RenewInterval time.Duration
	// RetryPeriod is the pause after a failed etcd request, while
	// campaigning or renewing (a candidacy that keeps failing waits
	// longer each time, up to 8 RetryPeriods). Default TTL/10. Lower retries sooner after
	// a blip at the cost of more requests against a struggling etcd. Must
	// be less than RenewDeadline.
	RetryPeriod time.Duration
	// HedgeAfter: a renewal probe or a pulse not answered within it is
	// sent once more beside the first (hedge.go), which the client's
	// round-robin gives to another member: a request stuck on a frozen
	// etcd member (no answer, no reset, until the client's keepalive
	// leaves it after about 15 s) then costs HedgeAfter, not the renewal
	// deadline or the deposition window. The first stays in flight, so a
	// cluster that is merely slow answers it as before. Default half of
	// PulseInterval (500 ms), at most RetryPeriod.
	HedgeAfter time.Duration

	// PulsePrefix is where leaders publish their liveness pulse: the key
	// PulsePrefix+BotID, bound to the leader's lease. Default
	// DefaultPulsePrefix. It must not lie under Prefix or LegacyPrefix
	// (concurrency.Election reads every key under an election's name as a
	// candidate). Every node of a deployment must use the same one.
	PulsePrefix string
	// PulseInterval is how often a leader bumps its pulse: one owner-checked
	// etcd write (about 90 bytes) per led bot per interval. Default 1s, at
	// least MinPulseInterval. Lower detects a hung leader no sooner (that is
	// PulseTimeout) but tolerates shorter pauses; it costs writes.
	PulseInterval time.Duration
	// PulseTimeout is how long a standby waits without seeing the leader's
	// pulse move before it confirms that with a linearizable read and
	// deposes the leader (deletes its key, owner-checked, and revokes its
	// lease): a hung process or a machine that is gone is replaced after
	// about PulseTimeout instead of TTL. Default 3s; at least
	// 2*PulseInterval, so one late pulse never deposes. Lower takes over
	// sooner after a hang but deposes leaders that pause (GC, a loaded
	// machine, a slow etcd write) for longer than PulseTimeout minus
	// PulseInterval; each such deposition costs one WeCom kick. A value at
	// or above TTL is allowed but pointless (the lease expires first). The
	// larger of this node's value and the one the leader advertises in
	// its election value is used, so nodes with different settings do not
	// depose each other early.
	PulseTimeout time.Duration
	// Batch, if set, is this node's shared pulse (NewBatch): the term's
	// pulse is a counter in the node's record, which the Batch writes for
	// every term of the node at once (one etcd write a node per
	// PulseInterval, not one a led bot), and the leader advertises
	// "node_pulse_ms" instead of "pulse_ms". Nil: the per-bot pulse key,
	// as botctl 0.5.0 writes it. Standbys read either kind, whatever
	// their own. Its PulseInterval and NodePulsePrefix must be this
	// Config's.
	Batch *Batch
	// NodePulsePrefix is where nodes' pulse records lie (a Batch's
	// NodePulsePrefix): a standby reads the record NodePulsePrefix+node of
	// a leader that advertises a node pulse. Default
	// DefaultNodePulsePrefix. It must not lie under Prefix, LegacyPrefix
	// or PulsePrefix.
	NodePulsePrefix string
	// NoPulse turns the pulse off on this node: its terms publish none,
	// so it is never deposed (a crash without restart then costs up to
	// TTL), and it deposes nobody. Leaders of nodes without the pulse (an
	// older botctl, or NoPulse) are never deposed: only a leader whose
	// election value advertises a pulse can be.
	NoPulse bool

	// Logger receives one line per term start and end and warnings about
	// failing etcd requests.
	Logger zerolog.Logger
	// Clock is what the renewal watchdog, the pulse and its timeout, and
	// the hedge's delay wait on. Default clock.Real.
	Clock clock.Clock
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.LegacyPrefix == "" {
		c.LegacyPrefix = DefaultLegacyPrefix
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.SafetyMargin == 0 {
		c.SafetyMargin = c.TTL / 4
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = c.TTL - c.SafetyMargin
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.TTL / 3
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = c.TTL / 10
	}
	if c.PulsePrefix == "" {
		c.PulsePrefix = DefaultPulsePrefix
	}
	if c.NodePulsePrefix == "" {
		c.NodePulsePrefix = DefaultNodePulsePrefix
		if c.Batch != nil {
			c.NodePulsePrefix = c.Batch.cfg.NodePulsePrefix
		}
	}
	if c.PulseInterval == 0 {
		c.PulseInterval = DefaultPulseInterval
		if c.Batch != nil {
			c.PulseInterval = c.Batch.cfg.PulseInterval
		}
	}
	if c.PulseTimeout == 0 {
		c.PulseTimeout = DefaultPulseTimeout
	}
	if c.HedgeAfter == 0 {
		c.HedgeAfter = min(c.PulseInterval/2, c.RetryPeriod)
	}
	c.Clock = clock.Or(c.Clock)
	return c
}

// Validate reports the first problem with c after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.BotID == "":
		return errors.New("election: BotID is required")
	case strings.Contains(c.BotID, "/"):
		return fmt.Errorf("election: BotID %q must not contain '/'", c.BotID)
	case c.Prefix == c.LegacyPrefix:
		return fmt.Errorf("election: Prefix and LegacyPrefix (%q) must differ", c.Prefix)
	case c.NodeID == "":
		return errors.New("election: NodeID is required")
	case c.TTL < MinTTL:
		return fmt.Errorf("election: TTL (%s) must be at least %s, etcd's minimum lease TTL", c.TTL, MinTTL)
	case c.TTL%time.Second != 0:
		return fmt.Errorf("election: TTL (%s) must be a whole number of seconds: etcd lease TTLs are", c.TTL)
	case c.SafetyMargin < 0:
		return fmt.Errorf("election: SafetyMargin (%s) must be positive", c.SafetyMargin)
	case c.SafetyMargin >= c.TTL:
		return fmt.Errorf("election: SafetyMargin (%s) must be less than TTL (%s)", c.SafetyMargin, c.TTL)
	case c.RenewDeadline < 0:
		return fmt.Errorf("election: RenewDeadline (%s) must be positive", c.RenewDeadline)
	case c.RenewDeadline > c.TTL-c.SafetyMargin:
		return fmt.Errorf("election: RenewDeadline (%s) must not exceed TTL (%s) minus SafetyMargin (%s) = %s, or a leader could still act after its lease expired",
			c.RenewDeadline, c.TTL, c.SafetyMargin, c.TTL-c.SafetyMargin)
	case c.RenewInterval < 0:
		return fmt.Errorf("election: RenewInterval (%s) must be positive", c.RenewInterval)
	case c.RenewInterval >= c.RenewDeadline:
		return fmt.Errorf("election: RenewInterval (%s) must be less than RenewDeadline (%s), or one slow renewal ends the term", c.RenewInterval, c.RenewDeadline)
	case c.RetryPeriod < 0:
		return fmt.Errorf("election: RetryPeriod (%s) must be positive", c.RetryPeriod)
	case c.RetryPeriod >= c.RenewDeadline:
		return fmt.Errorf("election: RetryPeriod (%s) must be less than RenewDeadline (%s), or a failed renewal is never retried", c.RetryPeriod, c.RenewDeadline)
	case c.NoPulse:
	case strings.HasPrefix(c.PulsePrefix, c.Prefix) || strings.HasPrefix(c.Prefix, c.PulsePrefix) ||
		strings.HasPrefix(c.PulsePrefix, c.LegacyPrefix) || strings.HasPrefix(c.LegacyPrefix, c.PulsePrefix):
		return fmt.Errorf("election: PulsePrefix (%q) must not overlap Prefix (%q) or LegacyPrefix (%q)", c.PulsePrefix, c.Prefix, c.LegacyPrefix)
	case overlaps(c.NodePulsePrefix, c.Prefix, c.LegacyPrefix, c.PulsePrefix):
		return fmt.Errorf("election: NodePulsePrefix (%q) must not overlap Prefix (%q), LegacyPrefix (%q) or PulsePrefix (%q)", c.NodePulsePrefix, c.Prefix, c.LegacyPrefix, c.PulsePrefix)
	case c.Batch != nil && (c.Batch.cfg.PulseInterval != c.PulseInterval || c.Batch.cfg.NodePulsePrefix != c.NodePulsePrefix):
		return fmt.Errorf("election: the Batch's PulseInterval (%s) and NodePulsePrefix (%q) must be this Config's (%s, %q)",
			c.Batch.cfg.PulseInterval, c.Batch.cfg.NodePulsePrefix, c.PulseInterval, c.NodePulsePrefix)
	case c.Batch != nil && c.Batch.cfg.NodeID != c.NodeID:
		return fmt.Errorf("election: the Batch is node %q's, not %q's", c.Batch.cfg.NodeID, c.NodeID)
	case c.PulseInterval < MinPulseInterval:
		return fmt.Errorf("election: PulseInterval (%s) must be at least %s (each pulse is an etcd write)", c.PulseInterval, MinPulseInterval)
	case c.HedgeAfter < 0:
		return fmt.Errorf("election: HedgeAfter (%s) must be positive", c.HedgeAfter)
	case c.PulseTimeout < 2*c.PulseInterval:
		return fmt.Errorf("election: PulseTimeout (%s) must be at least twice PulseInterval (%s), or one late pulse deposes the leader", c.PulseTimeout, c.PulseInterval)
	}
	return nil
}

// overlaps reports whether p lies under one of others, or one under p.
func overlaps(p string, others ...string) bool {
	for _, o := range others {
		if strings.HasPrefix(p, o) || strings.HasPrefix(o, p) {
			return true
		}
	}
	return false
}
