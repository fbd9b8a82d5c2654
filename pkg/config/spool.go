package config

import (
	"time"

	"github.com/botctl/botctl/jetstream"
)

// Spool bounds the node's local spool: the tasks it keeps on disk while
// JetStream cannot take them (jetstream.Spool), forwarded in order when
// it is back.
type Spool struct {
	// MaxEntries and MaxBytes bound what waits in the spool (bytes as
	// stored: the task's JSON and a few fields). Past either a new task
	// is refused: it goes to a fallback tier if one takes it, or its user
	// is told at once that the system cannot take the question now and
	// to try again later; never a disk filled. Defaults 10000 entries and
	// 64 MiB: about an hour of 3 messages a second on this node.
	MaxEntries int   `yaml:"max_entries"`
	MaxBytes   int64 `yaml:"max_bytes"`
	// Expiry is how long a task may wait in the spool. One that waited
	// longer when JetStream is back is not run: its user is told the
	// message was not answered and to send it again (an answer an hour
	// late answers a question given up on, or asked again). Default 1h.
	Expiry time.Duration `yaml:"expiry"`
	// LateAfter: a task forwarded after waiting longer than this is
	// answered with a note that the answer is late (push.late_note's
	// text, the gap backfill's). Default 2m; below Expiry.
	LateAfter time.Duration `yaml:"late_after"`
}

func spoolDefaults() Spool {
	return Spool{MaxEntries: jetstream.DefaultSpoolMaxEntries, MaxBytes: jetstream.DefaultSpoolMaxBytes,
		Expiry: time.Hour, LateAfter: 2 * time.Minute}
}

func (c *Config) validateSpool(bad func(key, format string, args ...any)) {
	s := c.Spool
	if s.MaxEntries <= 0 {
		bad("spool.max_entries", "must be positive, got %d (the default is %d)", s.MaxEntries, jetstream.DefaultSpoolMaxEntries)
	}
	if s.MaxBytes <= 0 {
		bad("spool.max_bytes", "must be positive, got %d (the default is %d)", s.MaxBytes, jetstream.DefaultSpoolMaxBytes)
	}
	if s.Expiry <= 0 {
		bad("spool.expiry", "must be positive, got %s (the default is 1h)", s.Expiry)
	}
	if s.LateAfter <= 0 || (s.Expiry > 0 && s.LateAfter >= s.Expiry) {
		bad("spool.late_after", "%s: want a positive duration below spool.expiry (%s)", s.LateAfter, s.Expiry)
	}
}
