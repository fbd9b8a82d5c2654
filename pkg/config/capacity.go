package config

import (
	"bufio"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// How worker.slots is derived when it is 0 (the default): from the
// memory this process may use, capped by ai.max_concurrency when that
// is set. An AI task is I/O-bound (it waits on the model's stream), so
// a slot costs memory, not CPU; sizing by cores would leave the machine
// idle while users queue (bench/completion.md).
const (
	// SlotMemory is what one slot is budgeted: a running task holds
	// about 44 KB of heap and stacks with the demo backend, up to twice
	// that in RSS (BenchmarkRunningTaskMemory in pkg/worker,
	// bench/completion.md); a real backend adds its HTTP stream's and
	// TLS buffers and a long answer's text, hence about three times the
	// measured RSS.
	SlotMemory = 256 << 10
	// SlotMemoryShare is the share of the memory that full slots may
	// take: half, the rest for the process's own (NATS client, pusher,
	// caches) and what else runs on the machine.
	SlotMemoryShare = 2 // 1/SlotMemoryShare
	// MinDerivedSlots is the least a derivation gives, however small
	// the machine.
	MinDerivedSlots = 64
)

// DeriveSlots is worker.slots' default on a machine whose process may
// use memory bytes (0: unknown) with ai.max_concurrency maxConcurrency
// (0: no limit): memory/SlotMemoryShare/SlotMemory, between
// MinDerivedSlots and MaxSlots (DefaultWorkerSlots when the memory is
// unknown), and no more than maxConcurrency when that is set — the
// worker fetches no more queue tasks than it has AI tokens, so slots
// beyond them would stay empty.
//
// A 4 GiB machine gets 8,192 (MaxSlots): three such nodes, one leading
// (worker.leader_slots 256), hold 16,640 answers at once; 10,000 need
// nodes of 2.4 GiB or more.
func DeriveSlots(memory uint64, maxConcurrency int) int {
	n := DefaultWorkerSlots
	if memory > 0 {
		n = int(min(memory/SlotMemoryShare/SlotMemory, MaxSlots))
		n = max(n, MinDerivedSlots)
	}
	if maxConcurrency > 0 && maxConcurrency < n {
		n = maxConcurrency
	}
	return n
}

// MachineMemory is the memory this process may use, in bytes: the
// least of the machine's (/proc/meminfo's MemTotal), its cgroup's limit
// (v2 memory.max or v1 memory.limit_in_bytes) and GOMEMLIMIT; 0 when
// none can be read.
func MachineMemory() uint64 {
	m := memoryUnder("/")
	if lim := debug.SetMemoryLimit(-1); lim > 0 && lim < math.MaxInt64 && (m == 0 || uint64(lim) < m) {
		m = uint64(lim)
	}
	return m
}

// memoryUnder is MachineMemory's reading of the files under root
// (a test's directory in tests), GOMEMLIMIT aside.
func memoryUnder(root string) uint64 {
	var m uint64
	least := func(v uint64) {
		if v > 0 && (m == 0 || v < m) {
			m = v
		}
	}
	if f, err := os.Open(filepath.Join(root, "proc/meminfo")); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			// "MemTotal:       24683636 kB"
			if f := strings.Fields(s.Text()); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseUint(f[1], 10, 64); err == nil {
					least(kb << 10)
				}
			}
		}
		f.Close()
	}
	for _, p := range []string{"sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		raw, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			continue
		}
		// "max" (v2) or a huge number (v1) when there is no limit: both
		// are left to MemTotal.
		if v, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64); err == nil && v < 1<<60 {
			least(v)
		}
	}
	return m
}

// Derived is the configuration with what is derived at start filled in:
// worker.slots when it is 0 (DeriveSlots over MachineMemory). Resolve
// does it too; serve does it for a configuration built in code.
func (c Config) Derived() Config {
	c.resolveSlots(MachineMemory())
	return c
}

// resolveSlots sets worker.slots when it is 0 (DeriveSlots over memory).
func (c *Config) resolveSlots(memory uint64) {
	if c.Worker.Slots == 0 {
		c.Worker.Slots = DeriveSlots(memory, c.AI.MaxConcurrency)
	}
}

// LeaderSlotsAll is worker.leader_slots "all": a leader uses as many
// slots as worker.slots. A word in the file, not a number: 0 means no
// answers at all, and a negative count would read as a typo.
const LeaderSlotsAll = -1
