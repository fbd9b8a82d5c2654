package election

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Defaults; see Config for what each one trades off.
const (
	DefaultPrefix = "/botctl/election/"
	DefaultTTL    = 20 * time.Second
	// MinTTL is etcd's smallest lease TTL with its default heartbeat and
	// election timeout (1.5 election timeouts, rounded up to a second).
	MinTTL = 2 * time.Second
)

// Config configures one bot's election on one node. Zero values take the
// defaults; Validate reports unsafe combinations.
type Config struct {
	// Prefix of election keys; a bot's key is Prefix+BotID. Default
	// DefaultPrefix. Every node of a deployment must use the same prefix.
	Prefix string
	// BotID names the bot whose connection is elected. Required; must not
	// contain "/".
	BotID string
	// NodeID names this node in the key's value and in logs. Required.
	NodeID string

	// TTL of each term's etcd lease: after a crash, how long the bot has
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
	// RenewInterval is how often the lease is renewed. Default TTL/3 (as
	// etcd's concurrency.Session). Must be less than RenewDeadline so at
	// least one more renewal is tried before giving up; lower means more
	// chances but more etcd load (one request per bot per interval).
	RenewInterval time.Duration
	// RetryPeriod is the pause after a failed etcd request, while
	// campaigning or renewing. Default TTL/10. Lower retries sooner after
	// a blip at the cost of more requests against a struggling etcd. Must
	// be less than RenewDeadline.
	RetryPeriod time.Duration

	// Logger receives one line per term start and end and warnings about
	// failing etcd requests.
	Logger zerolog.Logger
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
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
	}
	return nil
}
