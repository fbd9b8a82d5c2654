package election

import (
	"fmt"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/rs/zerolog"
)

var zerologNop = zerolog.Nop()

func TestConfigDefaults(t *testing.T) {
	c := Config{BotID: "b", NodeID: "n"}.withDefaults()
	want := Config{Prefix: DefaultPrefix, LegacyPrefix: DefaultLegacyPrefix, BotID: "b", NodeID: "n", TTL: 20 * time.Second,
		SafetyMargin: 5 * time.Second, RenewDeadline: 15 * time.Second,
		RenewInterval: 20 * time.Second / 3, RetryPeriod: 2 * time.Second, HedgeAfter: 500 * time.Millisecond,
		PulsePrefix: DefaultPulsePrefix, PulseInterval: time.Second, PulseTimeout: 3 * time.Second, NodePulsePrefix: DefaultNodePulsePrefix, Clock: clock.Real}
	c.Logger, want.Logger = zerologNop, zerologNop
	if fmt.Sprint(c) != fmt.Sprint(want) {
		t.Fatalf("defaults = %+v\nwant %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	// The smallest TTL validates with its derived defaults.
	if err := (Config{BotID: "b", NodeID: "n", TTL: MinTTL}).Validate(); err != nil {
		t.Fatalf("TTL %s: %v", MinTTL, err)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{BotID: "b", NodeID: "n"}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" = valid
	}{
		{"defaults", func(c *Config) {}, ""},
		{"no bot", func(c *Config) { c.BotID = "" }, "election: BotID is required"},
		{"slash in bot", func(c *Config) { c.BotID = "a/b" }, `election: BotID "a/b" must not contain '/'`},
		{"prefix = legacy", func(c *Config) { c.Prefix = DefaultLegacyPrefix }, `election: Prefix and LegacyPrefix ("/botctl/election/") must differ`},
		{"no node", func(c *Config) { c.NodeID = "" }, "election: NodeID is required"},
		{"ttl too small", func(c *Config) { c.TTL = time.Second }, "election: TTL (1s) must be at least 2s, etcd's minimum lease TTL"},
		{"negative ttl", func(c *Config) { c.TTL = -time.Second }, "election: TTL (-1s) must be at least 2s, etcd's minimum lease TTL"},
		{"fractional ttl", func(c *Config) { c.TTL = 2500 * time.Millisecond }, "election: TTL (2.5s) must be a whole number of seconds: etcd lease TTLs are"},
		{"negative margin", func(c *Config) { c.SafetyMargin = -time.Second }, "election: SafetyMargin (-1s) must be positive"},
		{"margin = ttl", func(c *Config) { c.SafetyMargin = 20 * time.Second }, "election: SafetyMargin (20s) must be less than TTL (20s)"},
		{"deadline too long", func(c *Config) { c.RenewDeadline = 18 * time.Second },
			"election: RenewDeadline (18s) must not exceed TTL (20s) minus SafetyMargin (5s) = 15s, or a leader could still act after its lease expired"},
		{"deadline at limit", func(c *Config) { c.RenewDeadline = 15 * time.Second }, ""},
		{"bigger margin shortens the limit", func(c *Config) { c.SafetyMargin = 10 * time.Second; c.RenewDeadline = 12 * time.Second },
			"election: RenewDeadline (12s) must not exceed TTL (20s) minus SafetyMargin (10s) = 10s, or a leader could still act after its lease expired"},
		{"negative deadline", func(c *Config) { c.RenewDeadline = -time.Second }, "election: RenewDeadline (-1s) must be positive"},
		{"interval = deadline", func(c *Config) { c.RenewDeadline = 6 * time.Second; c.RenewInterval = 6 * time.Second },
			"election: RenewInterval (6s) must be less than RenewDeadline (6s), or one slow renewal ends the term"},
		{"default interval vs short deadline", func(c *Config) { c.RenewDeadline = 5 * time.Second },
			"election: RenewInterval (6.666666666s) must be less than RenewDeadline (5s), or one slow renewal ends the term"},
		{"negative interval", func(c *Config) { c.RenewInterval = -time.Second }, "election: RenewInterval (-1s) must be positive"},
		{"negative retry", func(c *Config) { c.RetryPeriod = -time.Second }, "election: RetryPeriod (-1s) must be positive"},
		{"retry too long", func(c *Config) { c.RetryPeriod = 15 * time.Second },
			"election: RetryPeriod (15s) must be less than RenewDeadline (15s), or a failed renewal is never retried"},
		{"test timings", func(c *Config) { c.TTL = 3 * time.Second; c.SafetyMargin = 1500 * time.Millisecond }, ""},
		{"pulse under the election prefix", func(c *Config) { c.PulsePrefix = DefaultPrefix + "pulse/" },
			`election: PulsePrefix ("/botctl/elect/pulse/") must not overlap Prefix ("/botctl/elect/") or LegacyPrefix ("/botctl/election/")`},
		{"pulse prefix = legacy", func(c *Config) { c.PulsePrefix = DefaultLegacyPrefix },
			`election: PulsePrefix ("/botctl/election/") must not overlap Prefix ("/botctl/elect/") or LegacyPrefix ("/botctl/election/")`},
		{"node pulse prefix under the pulse prefix", func(c *Config) { c.NodePulsePrefix = DefaultPulsePrefix + "nodes/" },
			`election: NodePulsePrefix ("/botctl/pulse/nodes/") must not overlap Prefix ("/botctl/elect/"), LegacyPrefix ("/botctl/election/") or PulsePrefix ("/botctl/pulse/")`},
		{"batch of another interval", func(c *Config) {
			c.Batch = &Batch{cfg: BatchConfig{NodeID: "n", NodePulsePrefix: DefaultNodePulsePrefix, PulseInterval: 2 * time.Second}}
			c.PulseInterval = time.Second
		}, `election: the Batch's PulseInterval (2s) and NodePulsePrefix ("/botctl/nodepulse/") must be this Config's (1s, "/botctl/nodepulse/")`},
		{"batch of another node", func(c *Config) {
			c.Batch = &Batch{cfg: BatchConfig{NodeID: "other", NodePulsePrefix: DefaultNodePulsePrefix, PulseInterval: time.Second}}
		}, `election: the Batch is node "other"'s, not "n"'s`},
		{"pulse too often", func(c *Config) { c.PulseInterval = 50 * time.Millisecond },
			"election: PulseInterval (50ms) must be at least 100ms (each pulse is an etcd write)"},
		{"negative pulse interval", func(c *Config) { c.PulseInterval = -time.Second },
			"election: PulseInterval (-1s) must be at least 100ms (each pulse is an etcd write)"},
		{"pulse timeout below two intervals", func(c *Config) { c.PulseTimeout = 1500 * time.Millisecond },
			"election: PulseTimeout (1.5s) must be at least twice PulseInterval (1s), or one late pulse deposes the leader"},
		{"negative pulse timeout", func(c *Config) { c.PulseTimeout = -time.Second },
			"election: PulseTimeout (-1s) must be at least twice PulseInterval (1s), or one late pulse deposes the leader"},
		{"pulse timeout at two intervals", func(c *Config) { c.PulseTimeout = 2 * time.Second }, ""},
		{"pulse off ignores pulse settings", func(c *Config) { c.NoPulse = true; c.PulseTimeout = time.Millisecond }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Fatalf("Validate() = %v\nwant        %s", err, tc.want)
			}
			if _, nerr := New(nil, c); nerr == nil {
				t.Fatal("New(nil client) succeeded")
			}
		})
	}
}
