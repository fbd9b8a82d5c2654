package config

import (
	"strings"
	"testing"
	"time"
)

// nats.jetstream_failover defaults to 30s, is read from the file and the
// environment, may be 0 (never), and a value out of range is refused
// naming the key.
func TestJetStreamFailover(t *testing.T) {
	if d := Defaults(); d.NATS.JetStreamFailover != 30*time.Second {
		t.Fatalf("default %s, want 30s", d.NATS.JetStreamFailover)
	}
	p := writeFile(t, "nats:\n  jetstream_failover: 1m\nbots:\n  - {id: b1, secret: s}\n")
	cfg, err := Load(p, nil)
	if err != nil || cfg.NATS.JetStreamFailover != time.Minute {
		t.Fatalf("from the file: %s %v", cfg.NATS.JetStreamFailover, err)
	}
	if cfg, err := Load(p, []string{"BOTCTL_NATS_JETSTREAM_FAILOVER=0s"}); err != nil || cfg.NATS.JetStreamFailover != 0 {
		t.Fatalf("0 from the environment: %s %v", cfg.NATS.JetStreamFailover, err)
	}
	if _, err := Load(writeFile(t, "nats:\n  jetstream_failover: soon\n"), nil); err == nil || !strings.Contains(err.Error(), "nats.jetstream_failover") {
		t.Fatalf("a word: %v, want an error naming the key", err)
	}
	for _, d := range []time.Duration{-time.Second, time.Second, time.Hour} {
		cfg := Defaults()
		cfg.Bots = []Bot{{ID: "b1", Secret: "s"}}
		cfg.NATS.JetStreamFailover = d
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "config key nats.jetstream_failover") {
			t.Errorf("%s: %v, want an error naming the key", d, err)
		}
	}
}
