package config

import (
	"strings"
	"testing"
	"time"
)

// The bounds of issue 25 item 8 have defaults, are read from the file and
// the environment, and a value out of range is refused naming its key.
func TestAnswerCapAndSpoolBounds(t *testing.T) {
	d := Defaults()
	if d.AI.MaxAnswerBytes != 512<<10 || d.Spool.MaxEntries != 10000 || d.Spool.MaxBytes != 64<<20 || d.Spool.Expiry != time.Hour || d.Spool.LateAfter != 2*time.Minute {
		t.Fatalf("defaults: ai %+v, spool %+v", d.AI, d.Spool)
	}
	p := writeFile(t, `
ai:
  max_answer_bytes: 100000
spool:
  max_entries: 50
  expiry: 10m
`)
	cfg, err := Load(p, []string{"BOTCTL_SPOOL_MAX_BYTES=1048576", "BOTCTL_SPOOL_LATE_AFTER=30s"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AI.MaxAnswerBytes != 100000 || cfg.Spool.MaxEntries != 50 || cfg.Spool.MaxBytes != 1<<20 || cfg.Spool.Expiry != 10*time.Minute || cfg.Spool.LateAfter != 30*time.Second {
		t.Fatalf("read: ai %+v, spool %+v", cfg.AI, cfg.Spool)
	}
	for _, c := range []struct {
		key string
		set func(*Config)
	}{
		{"ai.max_answer_bytes", func(c *Config) { c.AI.MaxAnswerBytes = 2 << 20 }},
		{"ai.max_answer_bytes", func(c *Config) { c.AI.MaxAnswerBytes = -1 }},
		{"spool.max_entries", func(c *Config) { c.Spool.MaxEntries = 0 }},
		{"spool.max_bytes", func(c *Config) { c.Spool.MaxBytes = -5 }},
		{"spool.expiry", func(c *Config) { c.Spool.Expiry = 0 }},
		{"spool.late_after", func(c *Config) { c.Spool.LateAfter = 2 * time.Hour }},
	} {
		cfg := Defaults()
		cfg.Bots = []Bot{{ID: "b1", Secret: "s"}}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("defaults do not validate: %v", err)
		}
		c.set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "config key "+c.key) {
			t.Errorf("%s out of range: %v, want an error naming the key", c.key, err)
		}
	}
}
