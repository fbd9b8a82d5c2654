package config

import (
	"os"
	"path/filepath"
	"testing"
)

// worker.slots' default follows the machine's memory and the backend's
// declared concurrency: three nodes of 4 GiB on defaults, one leading,
// hold 10,000 answers at once; a provider's limit caps it; an unknown
// machine falls back to DefaultWorkerSlots.
func TestDeriveSlots(t *testing.T) {
	const gib = 1 << 30
	cases := []struct {
		name   string
		memory uint64
		maxc   int
		want   int
	}{
		{"unknown memory", 0, 0, DefaultWorkerSlots},
		{"1 GiB", 1 * gib, 0, 2048},
		{"4 GiB: the most", 4 * gib, 0, MaxSlots},
		{"64 GiB: still the most", 64 * gib, 0, MaxSlots},
		{"a 16 MiB container: the least", 16 << 20, 0, MinDerivedSlots},
		{"provider allows 300 here", 4 * gib, 300, 300},
		{"provider allows more than memory", 1 * gib, 5000, 2048},
		{"unknown memory, provider 40", 0, 40, 40},
	}
	for _, c := range cases {
		if got := DeriveSlots(c.memory, c.maxc); got != c.want {
			t.Errorf("%s: DeriveSlots(%d, %d) = %d, want %d", c.name, c.memory, c.maxc, got, c.want)
		}
	}
	three := func(memory uint64) int { return 2*DeriveSlots(memory, 0) + DefaultLeaderSlots }
	if n := three(4 * gib); n < 10000 {
		t.Errorf("three 4 GiB nodes on defaults hold %d answers at once, want 10,000", n)
	}
	if n := three(24 * gib / 10); n < 10000 {
		t.Errorf("three 2.4 GiB nodes on defaults hold %d answers at once, want 10,000 (the rule the docs state)", n)
	}
}

// The memory is the least of MemTotal and the cgroup's limit (v2 or v1);
// "max" and v1's no-limit number leave MemTotal.
func TestMemoryUnder(t *testing.T) {
	root := func(files map[string]string) string {
		d := t.TempDir()
		for p, s := range files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(d, p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, p), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	meminfo := "MemFree:         1000 kB\nMemTotal:       8388608 kB\n"
	cases := []struct {
		name  string
		files map[string]string
		want  uint64
	}{
		{"nothing readable", nil, 0},
		{"meminfo only", map[string]string{"proc/meminfo": meminfo}, 8 << 30},
		{"cgroup v2 without limit", map[string]string{"proc/meminfo": meminfo, "sys/fs/cgroup/memory.max": "max\n"}, 8 << 30},
		{"cgroup v2 limit", map[string]string{"proc/meminfo": meminfo, "sys/fs/cgroup/memory.max": "1073741824\n"}, 1 << 30},
		{"cgroup v1 without limit", map[string]string{"proc/meminfo": meminfo, "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 8 << 30},
		{"cgroup v1 limit", map[string]string{"proc/meminfo": meminfo, "sys/fs/cgroup/memory/memory.limit_in_bytes": "536870912\n"}, 512 << 20},
	}
	for _, c := range cases {
		if got := memoryUnder(root(c.files)); got != c.want {
			t.Errorf("%s: %d bytes, want %d", c.name, got, c.want)
		}
	}
}

// Resolve derives worker.slots when it is 0 and keeps a number set.
func TestResolveSlots(t *testing.T) {
	c := Defaults()
	if c.Worker.Slots != 0 {
		t.Fatalf("default worker.slots %d, want 0 (derived at start)", c.Worker.Slots)
	}
	c.AI.MaxConcurrency = 77
	c.resolveSlots(4 << 30)
	if c.Worker.Slots != 77 {
		t.Fatalf("derived %d, want ai.max_concurrency's 77", c.Worker.Slots)
	}
	c = Defaults()
	c.Worker.Slots = 600
	c.resolveSlots(4 << 30)
	if c.Worker.Slots != 600 {
		t.Fatalf("set 600, resolved to %d", c.Worker.Slots)
	}
	if err := c.Resolve(nil); err != nil || c.Worker.Slots != 600 {
		t.Fatalf("Resolve: %v, slots %d", err, c.Worker.Slots)
	}
	c = Defaults()
	if err := c.Resolve(nil); err != nil {
		t.Fatal(err)
	}
	if c.Worker.Slots < MinDerivedSlots || c.Worker.Slots > MaxSlots {
		t.Fatalf("this machine's derived slots %d, want %d to %d", c.Worker.Slots, MinDerivedSlots, MaxSlots)
	}
}
