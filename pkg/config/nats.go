package config

import "time"

// nats.jetstream_failover (NATS.JetStreamFailover) is how long every
// JetStream call may fail while the node's NATS connection is up (its
// server answers pings: cut off from its cluster) before the node moves
// the connection to another server of nats.url, and how long it may
// still fail after that before the node gives up its bots and campaigns
// for none until JetStream answers (pkg/jshealth). A failure while the
// connection is down does not count: nats.go reconnects by itself and
// the leader spools. 0 turns it off.

// DefaultJetStreamFailover is nats.jetstream_failover's default.
const DefaultJetStreamFailover = 30 * time.Second

var natsHealthKeys = []Key{
	{Name: "nats.jetstream_failover", Flag: "nats-jetstream-failover", Usage: "how long JetStream may fail on a live NATS connection before the node moves it to another server, and then before it gives up its bots (0: never)", set: dur(func(c *Config) *time.Duration { return &c.NATS.JetStreamFailover })},
}

func init() { Keys = append(Keys, natsHealthKeys...) }

// validateNATSHealth checks the keys by which a node judges its data
// plane: its clock against JetStream's, and JetStream's answers.
func (c *Config) validateNATSHealth(bad func(key, format string, args ...any)) {
	if c.NATS.MaxClockSkew < 0 || c.NATS.MaxClockSkew > 0 && c.NATS.MaxClockSkew < 100*time.Millisecond {
		bad("nats.max_clock_skew", "%s: want 0 (no check) or at least 100ms (a measurement is only as good as a round trip to NATS)", c.NATS.MaxClockSkew)
	}
	if f := c.NATS.JetStreamFailover; f < 0 || f > 0 && (f < 5*time.Second || f > 10*time.Minute) {
		bad("nats.jetstream_failover", "%s: want 0 (never) or 5s to 10m: long enough that a stream leader's election (a few seconds) is not taken for a cut-off server", f)
	}
}
