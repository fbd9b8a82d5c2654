// Command failover measures leader handover of real botctl processes: one
// `botctl infra`, one `botctl sim` and three `botctl serve` nodes, all built
// from this tree, with the production election settings (TTL 20s, safety
// margin 5s, pulse every 1s, pulse timeout 3s) unless flags say otherwise.
//
//	go run ./test/failover -rounds 20 -out bench/failover.md -csv bench/failover.csv
//
// Scenarios (-scenarios, comma-separated), each -rounds rounds; per round
// the leader of bot b1 is found and:
//
//   - graceful: SIGTERM (it drains, closes, resigns);
//   - kill9-restart: SIGKILL of the process, restarted at once with the
//     same data dir (systemd's Restart=always): the restarted node revokes
//     its previous lease, or a standby deposes it, whichever comes first;
//   - kill9: SIGKILL of the process, not restarted until the round is
//     measured: a standby deposes it when its pulse stops;
//   - sigstop: SIGSTOP (a hung process: its sockets stay open, nothing
//     answers), SIGCONT -stop later (default 30s): the standby deposes it;
//     woken, it must find out it lost and never connect again;
//   - machine-gone: SIGKILL of the whole process group, not restarted
//     until the round is measured;
//   - pause: no handover wanted. The leader is stopped for -pause (1s) and
//     continued for -pause, -cycles times per round (a GC pause or a loaded
//     machine, over and over); every deposition is a false one.
//
// Takeover is from the signal to the new connection's "subscribed" line at
// the simulator (JSON on its stderr, timestamped as this process reads it).
// Kicks are the simulator's (a connection replaced while another was
// open); ping-pong is every connection of a round beyond the one takeover
// (the old leader coming back, or any flip after). Depositions are the
// "deposed the leader" lines the nodes log. After each measured round the
// stopped node is restarted (or continued) and the cluster must be stable
// again before the next round. Targets: graceful p99 ≤ 1s, every other
// handover p99 ≤ 5s, ping-pong 0, and 0 depositions in pause; the exit code
// is 1 if one is missed.
package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/botctl/botctl/test/e2e/cluster"
)

const bot = "b1"

var allScenarios = []string{"graceful", "kill9-restart", "kill9", "sigstop", "machine-gone", "pause"}

var describe = map[string]string{
	"graceful":      "SIGTERM to the leader",
	"kill9-restart": "SIGKILL of the leader, restarted at once (same data dir)",
	"kill9":         "SIGKILL of the leader, no restart",
	"sigstop":       "SIGSTOP of the leader, SIGCONT after -stop",
	"machine-gone":  "SIGKILL of the leader's whole process group, no restart",
	"pause":         "leader stopped for -pause and continued for -pause, -cycles times (no handover wanted)",
}

type sample struct {
	scenario    string
	round       int
	start       time.Time
	from, to    string
	takeover    time.Duration // 0 in pause
	connections int64         // new connections at the simulator in the round
	kicks       int64         // kicks in the round
	pingPong    int64
	depositions int
	exitCode    int
	ready       time.Duration // kill9-restart: signal → the restarted node's ready line
}

func main() {
	var (
		rounds    = flag.Int("rounds", 20, "rounds per scenario")
		ttl       = flag.Duration("ttl", 20*time.Second, "--election-ttl of every node (production default 20s)")
		margin    = flag.Duration("margin", 5*time.Second, "--election-safety-margin of every node (production default 5s)")
		scenarios = flag.String("scenarios", strings.Join(allScenarios, ","), "comma-separated: "+strings.Join(allScenarios, ", "))
		stop      = flag.Duration("stop", 30*time.Second, "sigstop: how long the leader stays stopped")
		pause     = flag.Duration("pause", time.Second, "pause: each stop, and each run between stops")
		cycles    = flag.Int("cycles", 10, "pause: stop/continue cycles per round")
		out       = flag.String("out", "", "write a markdown report here")
		csvOut    = flag.String("csv", "", "write every round as CSV here")
		nodes     = flag.Int("nodes", 3, "botctl serve nodes")
		nodeArgs  = flag.String("node-args", "", "extra botctl serve flags, space-separated (e.g. --election-pulse-timeout 5s)")
	)
	flag.Parse()
	if *rounds < 1 || *nodes < 2 {
		fmt.Fprintln(os.Stderr, "failover: -rounds must be ≥ 1 and -nodes ≥ 2")
		os.Exit(2)
	}
	var list []string
	for _, s := range strings.Split(*scenarios, ",") {
		s = strings.TrimSpace(s)
		if _, ok := describe[s]; !ok {
			fmt.Fprintf(os.Stderr, "failover: -scenarios: unknown %q (want %s)\n", s, strings.Join(allScenarios, ", "))
			os.Exit(2)
		}
		list = append(list, s)
	}
	start := time.Now()
	dir, err := os.MkdirTemp("", "botctl-failover-")
	check(err)
	defer os.RemoveAll(dir)
	binPath, err := cluster.Build(dir)
	check(err)

	var live []*cluster.Cluster
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		fmt.Fprintln(os.Stderr, "failover: interrupted; killing every process")
		for _, c := range live {
			c.Close()
		}
		os.Exit(130)
	}()

	var all []sample
	for _, sc := range list {
		c, err := cluster.Start(cluster.Options{Bin: binPath, Dir: dir + "/" + sc, Bots: []string{bot}, TTL: *ttl, Margin: *margin,
			NodeArgs: strings.Fields(*nodeArgs), StartTimeout: 60 * time.Second})
		live = append(live, c)
		if err != nil {
			fail(c, err)
		}
		for i := 1; i <= *nodes; i++ {
			if _, err := c.StartNode(fmt.Sprintf("n%d", i), ""); err != nil {
				fail(c, err)
			}
		}
		fmt.Printf("== %s (%s): %d rounds, TTL %v, margin %v, %d nodes\n", sc, describe[sc], *rounds, *ttl, *margin, *nodes)
		r := runner{c: c, ttl: *ttl, stop: *stop, pause: *pause, cycles: *cycles}
		for i := 1; i <= *rounds; i++ {
			s, err := r.round(sc, i)
			if err != nil {
				fail(c, fmt.Errorf("%s round %d: %w", sc, i, err))
			}
			all = append(all, s)
			fmt.Printf("%-13s round %2d: %s → %s  takeover %9s  connections %d  kicks %d  ping-pong %d  depositions %d\n",
				sc, i, s.from, s.to, fmtD(s.takeover), s.connections, s.kicks, s.pingPong, s.depositions)
		}
		c.Close()
	}
	elapsed := time.Since(start)

	if *csvOut != "" {
		check(writeCSV(*csvOut, all))
		fmt.Printf("rounds written to %s\n", *csvOut)
	}
	report, ok := render(all, list, reportInfo{start: start, elapsed: elapsed, rounds: *rounds, nodes: *nodes, ttl: *ttl, margin: *margin,
		stop: *stop, pause: *pause, cycles: *cycles, nodeArgs: *nodeArgs, csv: *csvOut})
	fmt.Print(report)
	if *out != "" {
		check(os.WriteFile(*out, []byte(report), 0o644))
		fmt.Printf("report written to %s\n", *out)
	}
	if !ok {
		fmt.Fprintln(os.Stderr, "failover: a target was missed (see the report)")
		os.Exit(1)
	}
}

type runner struct {
	c                *cluster.Cluster
	ttl, stop, pause time.Duration
	cycles           int
	procs            map[*cluster.Proc]bool
	deposed          map[string]bool
}

// depositions counts the distinct "deposed the leader" lines logged by
// every node process of the run so far (exited ones included: a node
// restarted in a round keeps its earlier lines in its old process). Lines
// are remembered, since a process keeps only its newest stderr lines.
func (r *runner) depositions() int {
	if r.procs == nil {
		r.procs, r.deposed = map[*cluster.Proc]bool{}, map[string]bool{}
	}
	for _, node := range r.c.Nodes() {
		r.procs[node.Proc] = true
	}
	for p := range r.procs {
		for _, l := range strings.Split(p.Stderr(), "\n") {
			if strings.Contains(l, "deposed the leader") {
				r.deposed[p.Name+" "+l] = true
			}
		}
	}
	return len(r.deposed)
}

// round runs one round of scenario sc.
func (r *runner) round(sc string, i int) (sample, error) {
	c := r.c
	s := sample{scenario: sc, round: i}
	leaders, err := c.WaitStable(2*r.ttl + 30*time.Second)
	if err != nil {
		return s, err
	}
	old := c.Node(leaders[bot])
	s.from = old.ID
	before, err := c.Stats(bot)
	if err != nil {
		return s, err
	}
	depBefore := r.depositions()
	pid := old.Proc.Pid()

	s.start = time.Now()
	t0 := s.start
	restarted := make(chan error, 1)
	switch sc {
	case "graceful":
		err = syscall.Kill(pid, syscall.SIGTERM)
	case "kill9", "kill9-restart":
		err = syscall.Kill(pid, syscall.SIGKILL)
		if err == nil && sc == "kill9-restart" {
			go func() {
				<-old.Proc.Done()
				_, err := c.RestartNode(old.ID)
				s.ready = time.Since(t0)
				restarted <- err
			}()
		}
	case "machine-gone":
		err = syscall.Kill(-pid, syscall.SIGKILL)
	case "sigstop":
		err = syscall.Kill(-pid, syscall.SIGSTOP)
	case "pause":
		for k := 0; k < r.cycles && err == nil; k++ {
			if err = syscall.Kill(-pid, syscall.SIGSTOP); err == nil {
				time.Sleep(r.pause)
				err = syscall.Kill(-pid, syscall.SIGCONT)
				time.Sleep(r.pause)
			}
		}
	}
	if err != nil {
		return s, err
	}

	if sc != "pause" {
		sub, err := c.WaitSubscribed(bot, t0, 2*r.ttl+30*time.Second)
		if err != nil {
			return s, err
		}
		s.takeover = sub.At.Sub(t0)
	}

	// Bring the cluster back to three running nodes.
	switch sc {
	case "graceful", "kill9", "machine-gone":
		code, err := old.Proc.Wait(30 * time.Second)
		if err != nil {
			return s, err
		}
		s.exitCode = code
		if sc == "graceful" && code != 0 {
			return s, fmt.Errorf("node %s exited %d after SIGTERM", old.ID, code)
		}
		if _, err := c.RestartNode(old.ID); err != nil {
			return s, err
		}
	case "kill9-restart":
		if err := <-restarted; err != nil {
			return s, err
		}
	case "sigstop":
		time.Sleep(time.Until(t0.Add(r.stop)))
		if err := syscall.Kill(-pid, syscall.SIGCONT); err != nil {
			return s, err
		}
	}
	l, err := c.WaitStable(2*r.ttl + 30*time.Second)
	if err != nil {
		return s, err
	}
	if sc == "sigstop" {
		// Woken, the old leader has caught up (it is a standby again).
		// Give it a few pulse intervals more to do anything foolish.
		time.Sleep(3 * time.Second)
		if l, err = c.WaitStable(2*r.ttl + 30*time.Second); err != nil {
			return s, err
		}
	}
	s.to = l[bot]
	after, err := c.Stats(bot)
	if err != nil {
		return s, err
	}
	s.connections = after.Connections - before.Connections
	s.kicks = after.Kicks - before.Kicks
	wanted := int64(1)
	if sc == "pause" {
		wanted = 0
	}
	s.pingPong = max(0, s.connections-wanted)
	s.depositions = r.depositions() - depBefore
	return s, nil
}

type reportInfo struct {
	start         time.Time
	elapsed       time.Duration
	rounds, nodes int
	ttl, margin   time.Duration
	stop, pause   time.Duration
	cycles        int
	nodeArgs, csv string
}

func render(all []sample, list []string, in reportInfo) (string, bool) {
	ok := true
	var b strings.Builder
	goVersion := runtime.Version()
	if out, err := exec.Command("go", "version").Output(); err == nil {
		goVersion = strings.TrimSpace(string(out))
	}
	fmt.Fprintf(&b, "# Failover benchmark\n\n")
	fmt.Fprintf(&b, "Real processes: one `botctl infra` (embedded etcd + NATS), one `botctl sim`, %d `botctl serve` nodes serving bot `%s`, all built from this tree, with the default election configuration. Produced by `test/failover` (see its doc comment).\n\n", in.nodes, bot)
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| command | `go run ./test/failover %s` |\n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&b, "| date | %s |\n", in.start.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "| nproc | %d |\n", runtime.NumCPU())
	fmt.Fprintf(&b, "| go version | %s |\n", goVersion)
	fmt.Fprintf(&b, "| election | TTL %v, safety margin %v, pulse interval 1s, pulse timeout 3s (defaults)%s |\n", in.ttl, in.margin, map[bool]string{true: "", false: "; node args `" + in.nodeArgs + "`"}[in.nodeArgs == ""])
	fmt.Fprintf(&b, "| rounds per scenario | %d |\n", in.rounds)
	fmt.Fprintf(&b, "| sigstop | stopped %v |\n", in.stop)
	fmt.Fprintf(&b, "| pause | %d cycles of %v stopped, %v running, per round |\n", in.cycles, in.pause, in.pause)
	fmt.Fprintf(&b, "| wall time | %v |\n", in.elapsed.Round(time.Second))
	if in.csv != "" {
		fmt.Fprintf(&b, "| CSV | `%s` (every round) |\n", in.csv)
	}
	fmt.Fprintf(&b, "\nTakeover: from the signal to the new leader's connection subscribed at the simulator (its `subscribed` log line, timestamped as the harness reads the simulator's stderr). Kicks: the simulator's count of connections replaced while another was open. Ping-pong: connections in a round beyond the one takeover. Depositions: `deposed the leader` lines logged by the nodes.\n\n")
	fmt.Fprintf(&b, "| scenario | n | takeover p50 | p99 | max | target | met | kicks | ping-pong | depositions |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, sc := range list {
		var ds []time.Duration
		var kicks, pp int64
		dep := 0
		for _, s := range all {
			if s.scenario != sc {
				continue
			}
			ds = append(ds, s.takeover)
			kicks += s.kicks
			pp += s.pingPong
			dep += s.depositions
		}
		if len(ds) == 0 {
			continue
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		ppOK := pp == 0
		ok = ok && ppOK
		if sc == "pause" {
			depOK := dep == 0
			ok = ok && depOK
			fmt.Fprintf(&b, "| pause (%d×%v) | %d | — | — | — | 0 false depositions | %s | %d | %d | **%d false** |\n",
				in.cycles, in.pause, len(ds), yes(depOK && ppOK), kicks, pp, dep)
			continue
		}
		target, text := 5*time.Second, "p99 ≤ 5s"
		if sc == "graceful" {
			target, text = time.Second, "p99 ≤ 1s"
		}
		p99 := pct(ds, 99)
		met := p99 <= target && ppOK
		ok = ok && met
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s, 0 ping-pong | %s | %d | %d | %d |\n",
			sc, len(ds), fmtD(pct(ds, 50)), fmtD(p99), fmtD(ds[len(ds)-1]), text, yes(met), kicks, pp, dep)
	}
	var readies []time.Duration
	for _, s := range all {
		if s.ready > 0 {
			readies = append(readies, s.ready)
		}
	}
	if len(readies) > 0 {
		sort.Slice(readies, func(i, j int) bool { return readies[i] < readies[j] })
		fmt.Fprintf(&b, "\nkill9-restart: the restarted process printed its ready line (`serving bots`) p50 %s, max %s after the SIGKILL; a round whose deposition count is 1 was taken over by a standby's deposition before the restarted node revoked its old lease.\n",
			fmtD(pct(readies, 50)), fmtD(readies[len(readies)-1]))
	}
	fmt.Fprintf(&b, "\n## Rounds\n\n| scenario | round | start | from → to | takeover | new connections | kicks | ping-pong | depositions |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range all {
		fmt.Fprintf(&b, "| %s | %d | %s | %s → %s | %s | %d | %d | %d | %d |\n", s.scenario, s.round, s.start.UTC().Format("15:04:05"),
			s.from, s.to, fmtD(s.takeover), s.connections, s.kicks, s.pingPong, s.depositions)
	}
	return b.String(), ok
}

func writeCSV(path string, all []sample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"scenario", "round", "start", "from", "to", "takeover_ms", "new_connections", "kicks", "ping_pong", "depositions", "exit_code", "restart_ready_ms"})
	for _, s := range all {
		w.Write([]string{s.scenario, strconv.Itoa(s.round), s.start.UTC().Format(time.RFC3339Nano), s.from, s.to,
			strconv.FormatFloat(ms(s.takeover), 'f', 1, 64), strconv.FormatInt(s.connections, 10), strconv.FormatInt(s.kicks, 10),
			strconv.FormatInt(s.pingPong, 10), strconv.Itoa(s.depositions), strconv.Itoa(s.exitCode), strconv.FormatFloat(ms(s.ready), 'f', 1, 64)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func yes(b bool) string { return map[bool]string{true: "yes", false: "**no**"}[b] }

func pct(sorted []time.Duration, p float64) time.Duration {
	// nearest rank
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	k = max(0, min(k, len(sorted)-1))
	return sorted[k]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fmtD(d time.Duration) string {
	if d == 0 {
		return "—"
	}
	if d < 10*time.Second {
		return fmt.Sprintf("%.1f ms", ms(d))
	}
	return fmt.Sprintf("%.3f s", d.Seconds())
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		os.Exit(1)
	}
}

func fail(c *cluster.Cluster, err error) {
	fmt.Fprintf(os.Stderr, "failover: %v\n\nprocesses:\n%s", err, c.Dump(30))
	c.Close()
	os.Exit(1)
}
