package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// dist is a sorted sample of durations.
type dist []time.Duration

func (d dist) sorted() dist { s := slices.Clone(d); slices.Sort(s); return s }

func (d dist) pct(p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(float64(len(d)-1) * p)
	return d[i]
}

func (d dist) max() time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[len(d)-1]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// cpuTime is this process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStatusKB reads a kB field (VmHWM, VmRSS) of /proc/self/status.
func procStatusKB(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				return n
			}
		}
	}
	return 0
}

// resetHWM resets VmHWM (Linux: write 5 to clear_refs), so a phase's peak
// is its own. Best effort.
func resetHWM() { os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func mb(kb int64) string { return fmt.Sprintf("%.0f MB", float64(kb)/1024) }

// header is the common head of a report.
func header(title, command string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", title)
	fmt.Fprintf(&b, "- command: `%s`\n", command)
	fmt.Fprintf(&b, "- date: %s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "- machine: nproc %d, GOMAXPROCS %d, %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), cpuModel())
	fmt.Fprintf(&b, "- host speed: %s\n", hostSpeed())
	fmt.Fprintf(&b, "- go: %s (%s/%s)\n", goVersion(), runtime.GOOS, runtime.GOARCH)
	if rev, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		fmt.Fprintf(&b, "- commit: %s\n", strings.TrimSpace(string(rev)))
	}
	b.WriteString("\n")
	return b.String()
}

// hostSpeed is one core's SHA-256 throughput over half a second, and the
// steal seen meanwhile. Two hosts with the same nproc and model name ran
// the same code at 1.5× the CPU per message (bench/ramp-r3.md's runs of
// 2026-12-02 and 2026-12-03): a report's CPU and latency figures compare
// across hosts only beside this line.
func hostSpeed() string {
	buf := make([]byte, 1<<20)
	_, steal0 := machineCPU()
	start := time.Now()
	n := 0
	for time.Since(start) < 500*time.Millisecond {
		sha256.Sum256(buf)
		n++
	}
	el := time.Since(start)
	_, steal1 := machineCPU()
	return fmt.Sprintf("SHA-256 %.0f MB/s on one core, steal %.0f%% of a core meanwhile (measured when the report is written)",
		float64(n)/el.Seconds(), 100*(steal1-steal0).Seconds()/el.Seconds())
}

func goVersion() string { return runtime.Version() }

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "model name") {
			if i := strings.Index(line, ":"); i >= 0 {
				return strings.TrimSpace(line[i+1:])
			}
		}
	}
	return ""
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}
