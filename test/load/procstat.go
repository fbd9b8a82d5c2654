package main

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's utime and stime
// (100 on every Linux this runs on).
const clockTick = 10 * time.Millisecond

// procCPU is a process's user+system CPU time so far, from
// /proc/<pid>/stat (0 if the process is gone).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces: fields count from the
	// last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * clockTick
}

// procRSSKB is a process's VmRSS in kB (0 if gone).
func procRSSKB(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				return n
			}
		}
	}
	return 0
}

// otherRole is the pseudo-process of the CPU the machine spent outside
// the measured processes.
const otherRole = "other (not measured processes)"

// usage is what one process used over a measured window.
type usage struct {
	CPU     time.Duration
	PeakRSS int64 // kB, the highest VmRSS sampled
}

// sampler reads the CPU time of a set of processes at start and stop and
// samples their VmRSS every second in between.
type sampler struct {
	pids  map[string]int
	cpu0  map[string]time.Duration
	mu    sync.Mutex
	peak  map[string]int64
	stopc chan struct{}
	done  chan struct{}
	start time.Time
	busy0 time.Duration // machineBusy at start
	// ticks: every second's reading (cumulative CPU), for the timeline.
	ticks []tick
}

// tick is one second's reading of the sampler: cumulative CPU times.
type tick struct {
	at    time.Time
	busy  time.Duration            // machineBusy
	steal time.Duration            // of busy, the hypervisor's (machineCPU)
	cpu   map[string]time.Duration // procCPU by role
}

func startSampler(pids map[string]int) *sampler {
	s := &sampler{pids: pids, cpu0: map[string]time.Duration{}, peak: map[string]int64{}, stopc: make(chan struct{}), done: make(chan struct{}), start: time.Now()}
	for name, pid := range pids {
		s.cpu0[name] = procCPU(pid)
	}
	s.busy0 = machineBusy()
	s.sample()
	go func() {
		defer close(s.done)
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-s.stopc:
				return
			case <-tk.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *sampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := tick{at: time.Now(), cpu: map[string]time.Duration{}}
	t.busy, t.steal = machineCPU()
	for name, pid := range s.pids {
		s.peak[name] = max(s.peak[name], procRSSKB(pid))
		t.cpu[name] = procCPU(pid)
	}
	s.ticks = append(s.ticks, t)
}

// timeline returns the readings taken so far (after stop: all of them).
func (s *sampler) timeline() []tick {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ticks)
}

// stop ends the window: each process's CPU time over it and its peak RSS.
func (s *sampler) stop() (map[string]usage, time.Duration) {
	close(s.stopc)
	<-s.done
	s.sample()
	wall := time.Since(s.start)
	out := map[string]usage{}
	var ours time.Duration
	for name, pid := range s.pids {
		out[name] = usage{CPU: procCPU(pid) - s.cpu0[name], PeakRSS: s.peak[name]}
		ours += out[name].CPU
	}
	// Everything else the machine ran meanwhile (other benchmarks, builds,
	// perf itself): busy CPU time not spent in a measured process.
	out[otherRole] = usage{CPU: max(0, machineBusy()-s.busy0-ours)}
	return out, wall
}

// machineBusy is the CPU time every CPU of the machine has spent busy
// (user, nice, system, irq, softirq, steal) so far, from /proc/stat.
func machineBusy() time.Duration { busy, _ := machineCPU(); return busy }

// machineCPU reads /proc/stat's first line: busy as machineBusy, and of
// it steal, the time the hypervisor ran something else while a CPU of
// this VM had work (a noisy neighbour: the machine is slower than its
// nproc says).
func machineCPU() (busy, steal time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	var n int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system (idle iowait) irq softirq steal
		v, _ := strconv.ParseInt(f[i], 10, 64)
		n += v
	}
	st, _ := strconv.ParseInt(f[8], 10, 64)
	return time.Duration(n) * clockTick, time.Duration(st) * clockTick
}
