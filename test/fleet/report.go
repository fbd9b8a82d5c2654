package main

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// cpuTimes is each process's user+system CPU so far (/proc/PID/stat).
func cpuTimes(procs map[string]int) map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, pid := range procs {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis; utime and
		// stime are the 12th and 13th of them, in clock ticks (100/s).
		s := string(raw)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		k, _ := strconv.ParseInt(f[12], 10, 64)
		out[name] = time.Duration(u+k) * 10 * time.Millisecond
	}
	return out
}

// rss is a process's resident set in bytes (0 if unknown).
func rss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// goroutines reads go_goroutines from a node's /metrics (-1 if unknown).
func goroutines(api string) int {
	resp, err := http.Get(api + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	return -1
}

func loadavg() string {
	raw, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(raw))[:3], " ")
}

// pct is the q-th quantile (0..1) of sorted, nearest rank.
func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func mb(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func fmtSpread(s map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(s) {
		parts = append(parts, fmt.Sprintf("%s %d", k, s[k]))
	}
	return strings.Join(parts, ", ")
}

// render writes the report.
func (r *results) render(o options) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	w("# A fleet: %d bots on %d nodes, idle", o.bots, o.nodes)
	w("")
	w("- command: `go run ./test/fleet -bots %d -nodes %d -settle %v -idle %v -rebalance %v -soak %v -retention %v`", o.bots, o.nodes, o.settle, o.idle, o.rebalance, o.soak, o.retention)
	w("- date: %s; nproc %d; %s; commit %s; load average at the start %s (the machine is shared)",
		r.started.UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version(), strings.TrimSpace(string(commit)), r.load)
	w("- one `botctl infra` (embedded etcd and NATS), one `botctl sim`, %d `botctl serve`, every node serving every bot (`--bot` flags); election TTL 20s, margin 5s, pulse 1s, pulse timeout 3s; no traffic", o.nodes)
	w("")
	w("## Cold start")
	w("")
	w("Every node started at once; a bot is led at its first subscribe at the simulator.")
	w("")
	w("| nodes ready | first bot led | half led | p99 | every bot led | spread |")
	w("|---|---|---|---|---|---|")
	var ready []string
	for _, d := range r.coldNodesReady {
		ready = append(ready, secs(d))
	}
	w("| %s | %s | %s | %s | **%s** | %s |", strings.Join(ready, ", "), secs(pct(r.coldLed, 0)), secs(pct(r.coldLed, 0.5)), secs(pct(r.coldLed, 0.99)), secs(pct(r.coldLed, 1)), fmtSpread(r.coldSpread))
	if r.idleWindow == 0 {
		return b.String()
	}
	w("")
	w("## Idle")
	w("")
	w("Over %s, %v after every bot was led: **%.1f etcd revisions a second** (%d revisions).", secs(r.idleWindow), o.settle, float64(r.idleRevs)/r.idleWindow.Seconds(), r.idleRevs)
	w("")
	w("| key directory under /botctl/ | writes | a second |")
	w("|---|---|---|")
	for _, k := range sortedKeys(r.idleByDir) {
		w("| `%s` | %d | %.2f |", k, r.idleByDir[k], float64(r.idleByDir[k])/r.idleWindow.Seconds())
	}
	w("")
	w("| process | CPU (share of a core) | RSS | goroutines | RSS a bot | goroutines a bot |")
	w("|---|---|---|---|---|---|")
	for _, k := range sortedKeys(r.cpu) {
		g, perBot, gPerBot := "", "", ""
		if n, ok := r.goroutines[k]; ok {
			g, perBot, gPerBot = strconv.Itoa(n), fmt.Sprintf("%.0f kB", float64(r.rss[k])/1e3/float64(o.bots)), fmt.Sprintf("%.1f", float64(n)/float64(o.bots))
		}
		w("| %s | %.1f %% | %s | %s | %s | %s |", k, 100*r.cpu[k], mb(r.rss[k]), g, perBot, gPerBot)
	}
	w("")
	w("A node's RSS and goroutines a bot are its whole process's divided by the %d bots it serves (it leads about a third, stands by for the rest).", o.bots)
	if r.killed == "" {
		return b.String()
	}
	w("")
	w("## kill -9 of a node")
	w("")
	w("SIGKILL of %s, which led %d bots; takeover is from the signal to the bot's next subscribe at the simulator.", r.killed, r.killedBots)
	w("")
	w("| bots | led again | p50 | p99 | max | spread 5 s after the last |")
	w("|---|---|---|---|---|---|")
	w("| %d | %d | %s | **%s** | %s | %s |", r.killedBots, len(r.takeovers), secs(pct(r.takeovers, 0.5)), secs(pct(r.takeovers, 0.99)), secs(pct(r.takeovers, 1)), fmtSpread(r.afterKill))
	if len(r.deposed) > 0 {
		w("")
		w("Its two phases, from the standbys' logs (\"deposed the leader\"; %d of the %d bots led again; a bot whose old term ended otherwise, its lease expiring, has no deposition):", len(r.deposed), len(r.takeovers))
		w("")
		w("| phase | p50 | p99 | max |")
		w("|---|---|---|---|")
		w("| kill → deposed (the pulse's timeout, the confirming read, the compared delete) | %s | %s | %s |", secs(pct(r.deposed, 0.5)), secs(pct(r.deposed, 0.99)), secs(pct(r.deposed, 1)))
		w("| deposed → subscribed (the revoke, the winner's campaign, records, verify and dial) | %s | %s | %s |", secs(pct(r.afterDeposed, 0.5)), secs(pct(r.afterDeposed, 0.99)), secs(pct(r.afterDeposed, 1)))
	}
	if r.notLed > 0 {
		w("")
		w("**%d bots were not led again within 3 minutes.**", r.notLed)
	}
	if len(r.rebalanced) > 0 {
		w("")
		w("The node started again (same data dir); the spread every 15 s after it was back:")
		w("")
		w("| after | spread |")
		w("|---|---|")
		for _, s := range r.rebalanced {
			w("| %v | %s |", s.at, fmtSpread(s.spread))
		}
	}
	if len(r.soak) == 0 {
		return b.String()
	}
	first, last := r.soak[0], r.soak[len(r.soak)-1]
	w("")
	w("## etcd over %v", last.at)
	w("")
	w("Compacted every minute at the revision of %v before (the embedded etcd's own periodic compaction keeps 1h, which a shorter run would not reach); last compaction at revision %d.", o.retention, r.soakCompacted)
	w("Revision growth: %.1f a second (%d over %v).", float64(last.rev-first.rev)/max(1, last.at.Seconds()-first.at.Seconds()), last.rev-first.rev, last.at-first.at)
	w("")
	w("| after | revision | db size | db in use | infra RSS | largest node RSS |")
	w("|---|---|---|---|---|---|")
	for _, s := range r.soak {
		w("| %v | %d | %s | %s | %s | %s |", s.at, s.rev, mb(s.dbSize), mb(s.dbInUse), mb(s.rssInfra), mb(s.rssMax))
	}
	w("")
	w("Whole run: %v.", r.elapsed.Round(time.Second))
	return b.String()
}
