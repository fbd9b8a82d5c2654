package config

import (
	"strings"
	"testing"
	"time"
)

func TestElectionPulseAndKickKeys(t *testing.T) {
	d := Defaults().Election
	if d.PulseInterval != time.Second || d.PulseTimeout != 3*time.Second || d.KickLimit != 3 || d.KickWindow != 10*time.Minute {
		t.Fatalf("defaults = %+v", d)
	}
	cfg, err := Load(writeFile(t, "election:\n  pulse_interval: 500ms\n  pulse_timeout: 0s\n  kick_limit: 5\n"), []string{"BOTCTL_ELECTION_KICK_WINDOW=1h"})
	if err != nil {
		t.Fatal(err)
	}
	if e := cfg.Election; e.PulseInterval != 500*time.Millisecond || e.PulseTimeout != 0 || e.KickLimit != 5 || e.KickWindow != time.Hour {
		t.Fatalf("loaded = %+v", e)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("pulse off must validate: %v", err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"election:\n  pulse_interval: 50ms\n", "config key election.pulse_interval: 50ms: want at least 100ms"},
		{"election:\n  pulse_timeout: 1500ms\n", "config key election.pulse_timeout: 1.5s: want 0 (off) or at least twice election.pulse_interval (1s)"},
		{"election:\n  pulse_timeout: -1s\n", "config key election.pulse_timeout: -1s: want 0 (off)"},
		{"election:\n  kick_limit: 0\n", "config key election.kick_limit: must be at least 1, got 0"},
		{"election:\n  kick_window: 0s\n", "config key election.kick_window: must be positive, got 0s"},
	} {
		cfg, err := Load(writeFile(t, tc.yaml), nil)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("yaml %q: err = %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// election.balance: on by default at 10s, ±10 %, 10m and weight 1; each
// key loads from the file and the environment; each bad value is refused
// naming its key and the fix.
func TestElectionBalanceKeys(t *testing.T) {
	if d := Defaults().Election.Balance; d != (Balance{Enabled: true, Interval: 10 * time.Second, Tolerance: 0.1, Cooldown: 10 * time.Minute, Weight: 1}) {
		t.Fatalf("defaults = %+v", d)
	}
	cfg, err := Load(writeFile(t, "election:\n  balance:\n    interval: 30s\n    tolerance: 0.2\n    weight: 2.5\n"),
		[]string{"BOTCTL_ELECTION_BALANCE_COOLDOWN=20m", "BOTCTL_ELECTION_BALANCE_ENABLED=false"})
	if err != nil {
		t.Fatal(err)
	}
	if b := cfg.Election.Balance; b != (Balance{Enabled: false, Interval: 30 * time.Second, Tolerance: 0.2, Cooldown: 20 * time.Minute, Weight: 2.5}) {
		t.Fatalf("loaded = %+v", b)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"election:\n  balance:\n    interval: 100ms\n", "config key election.balance.interval: 100ms: want at least 1s"},
		{"election:\n  balance:\n    tolerance: 0\n", "config key election.balance.tolerance: 0: want more than 0 and less than 1"},
		{"election:\n  balance:\n    tolerance: 1.5\n", "config key election.balance.tolerance: 1.5: want more than 0 and less than 1"},
		{"election:\n  balance:\n    cooldown: 5s\n", "config key election.balance.cooldown: 5s: want at least election.balance.interval (10s)"},
		{"election:\n  balance:\n    weight: -1\n", "config key election.balance.weight: -1: want more than 0"},
	} {
		cfg, err := Load(writeFile(t, tc.yaml), nil)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("yaml %q: err = %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
