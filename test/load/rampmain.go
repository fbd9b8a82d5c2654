package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	proc "github.com/botctl/botctl/test/e2e/cluster"
	"github.com/botctl/botctl/test/infracluster"
)

// defaultSteps: the ramp (100 → 1,000 → 5,000 → 10,000
// conversations, 10 → 200 → 500 new messages/s, answers 30–120 s; 2,000
// at 250/s between), 1,000, 5,000 and 10,000 at one rate and answer time
// (issue 28: how cost grows with the conversations), the naive baseline
// at the 1,000- and the 5,000-conversation steps (issue 28's ratios),
// and one-node against three-node throughput with a backlog (short
// answers, so the one-node run stays near a minute). "+" steps are
// profiled (perf from outside, and each process's own pprof CPU and
// allocation profiles, written beside the report): one below the slots (what a message costs), the top
// one (where it breaks) and the naive bot; not the receipt target's step,
// so that sampling does not touch the figure the target is about.
//
// The top steps answer in 30 s, the shortest the issue allows: three nodes
// with the default slots run 256 + 2×1,024 = 2,304 answers at once, so
// 10,000 conversations are answered in five rounds, 10 minutes with
// 120 s answers; with 30 s answers the step takes under three.
const defaultSteps = "100@10/120s,1000@200/60s,2000@250/60s+,1000@500/30s,5000@500/30s,10000@500/30s+,naive:1000@200/60s+,naive:5000@500/30s,1node:2000@500/5s,2000@500/5s"

// smokeSteps are the -smoke ramp: tiny, for the test; both profiled, so
// that the test sees every profile written.
const smokeSteps = "50@10/5s+,naive:50@10/5s+"

func rampMain(args []string) error {
	fs := flag.NewFlagSet("ramp", flag.ExitOnError)
	out := fs.String("out", "", "write the Markdown report here (and .csv, -*.png and the + steps' pprof profiles in BASE-prof/ beside it; default stdout, no CSV, no plots, no profile files)")
	stepsFlag := fs.String("steps", defaultSteps, "steps, [naive:|Nnode:]CONVERSATIONS@RATE/ANSWER[+], comma-separated (+: profile with perf and pprof)")
	smoke := fs.Bool("smoke", false, "a tiny ramp ("+smokeSteps+"): checks that the ramp works")
	grace := fs.Duration("grace", 60*time.Second, "a step ends this long after its last answer was due, answered or not")
	tick := fs.Duration("naive-tick", naiveTick, "the naive bot's -tick: least time between two progress frames of a conversation (default botctl's progress gap at its default push.budget)")
	hz := fs.Int("perf-hz", 99, "perf sampling frequency of profiled steps (0: no perf, pprof only)")
	idle := fs.Duration("idle", 5*time.Second, "measure each step's processes this long with no traffic first (their idle cost)")
	dirFlag := fs.String("dir", "", "work dir (binaries, data); default a temp dir, removed at the end")
	topoFlag := fs.String("topology", string(topologySingle), "etcd and NATS under the nodes: single (1 etcd, 1 NATS server, JetStream replicas 1; bench/ramp.md's) or r3 (3 etcd members, 3 NATS servers, --nats-replicas 3: the production topology)")
	natsSync := fs.String("nats-sync", "always", `every NATS server's JetStream sync_interval: "always" (botctl's default) or an interval such as 2m (nats-server's default), to measure what fsyncing every write costs`)
	nodeArgs := fs.String("node-args", "", "extra flags for every botctl node, space-separated (an experiment: the report then says the nodes do not run the default configuration)")
	subjects := fs.Bool("subjects", false, "count each botctl step's NATS messages by kind of subject (a subscriber on \">\": the step's timings are not clean)")
	fs.Parse(args)
	topo, err := parseTopology(*topoFlag)
	if err != nil {
		return err
	}
	command := strings.TrimSpace("go run ./test/load ramp " + shellJoin(args))
	if *smoke {
		*stepsFlag = smokeSteps
		*grace = 30 * time.Second
	}
	steps, err := parseSteps(*stepsFlag)
	if err != nil {
		return err
	}
	o := rampOpts{grace: *grace, idle: *idle, tick: *tick, profHz: *hz, logf: logf, topology: topo, subjects: *subjects, natsSync: *natsSync, nodeArgs: strings.Fields(*nodeArgs)}
	base := strings.TrimSuffix(*out, filepath.Ext(*out))
	if *out != "" {
		o.profDir = base + "-prof"
	}
	results, err := runRamp(steps, o, *dirFlag)
	if err != nil && len(results) == 0 {
		return err
	}
	report := rampReport(command, topo, *natsSync, o.nodeArgs, results)
	if *out == "" {
		fmt.Print(report)
		return err
	}
	if werr := os.MkdirAll(filepath.Dir(*out), 0o755); werr != nil {
		return werr
	}
	if werr := os.WriteFile(*out, []byte(report), 0o644); werr != nil {
		return werr
	}
	if werr := writeRampCSV(base+".csv", results); werr != nil {
		return werr
	}
	if werr := rampPlots(base, results); werr != nil {
		return werr
	}
	logf("wrote %s, %s.csv, %s-*.png (and the profiles of + steps in %s-prof/)", *out, base, base, base)
	return err
}

// runRamp runs every step on a fresh deployment, in order. An error stops
// the ramp; the steps done so far are returned with it.
func runRamp(steps []step, o rampOpts, dir string) ([]*stepResult, error) {
	if o.natsSync == "" {
		o.natsSync = "always"
	}
	if o.tick <= 0 {
		o.tick = naiveTick
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "botctl-ramp-")
		if err != nil {
			return nil, err
		}
		dir = d
		defer os.RemoveAll(d)
	}
	o.logf("building botctl into %s", dir)
	bin, err := proc.Build(dir)
	if err != nil {
		return nil, err
	}
	if o.self == "" {
		if o.self, err = proc.BuildPackage(dir, "./test/load", "load"); err != nil {
			return nil, err
		}
	}
	if o.topology == "" {
		o.topology = topologySingle
	}
	if o.profDir == "" {
		o.profDir = filepath.Join(dir, "prof")
	}
	if o.topology == topologyR3 && o.infranode == "" {
		if o.infranode, err = infracluster.Build(dir); err != nil {
			return nil, err
		}
	}
	var results []*stepResult
	for i, st := range steps {
		o.logf("step %d: %s (%s)", i+1, st.spec, st.kind)
		t0 := time.Now()
		r, err := runStep(bin, dir, i+1, st, o)
		if err != nil {
			return results, fmt.Errorf("step %d %s: %w", i+1, st.spec, err)
		}
		o.logf("step %d %s done in %s: answered %d/%d, receipt p99 %s, push lag p99 %s, completion p99 %s, quota %d",
			i+1, st.spec, time.Since(t0).Round(time.Second), r.answered, st.conversations, ms(r.receipt.pct(.99)),
			ms(r.progressLag.pct(.99)), secs(r.completion.pct(.99)), r.quota)
		results = append(results, r)
	}
	return results, nil
}

func writeRampCSV(path string, rs []*stepResult) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	w.Write([]string{"step", "kind", "nodes", "conversations", "rate_per_s", "answer_s", "peak_live", "answered", "lost", "duplicated", "timed_out",
		"receipt_p50_ms", "receipt_p99_ms", "receipt_max_ms", "receipts_missing", "gen_late_p99_ms", "gen_late_max_ms", "post_errors",
		"push_lag_p50_ms", "push_lag_p99_ms", "push_lag_max_ms", "final_lag_p50_ms", "final_lag_p99_ms", "final_lag_max_ms",
		"completion_p50_s", "completion_p99_s", "completion_max_s", "over_answer_p99_s",
		"quota_violations", "expired_updates", "invalid_req_ids", "max_frames_per_60s", "heartbeat_frames", "frames", "throughput_per_s", "wall_s",
		"other_cpu_cores", "process", "cpu_s", "cores", "cpu_ms_per_message", "idle_cores", "marginal_cpu_ms_per_message", "peak_rss_mb"})
	for i, r := range rs {
		for _, role := range r.roles() {
			u := r.usage[role]
			w.Write([]string{strconvI(i + 1), r.kind, strconvI(r.nodes), strconvI(r.conversations), f1(r.rate), f1(r.answer.Seconds()), strconvI(r.peakLive),
				strconvI(r.answered), strconvI(r.lost), strconvI(r.dup), fmt.Sprint(r.timedOut),
				msf(r.receipt.pct(.5)), msf(r.receipt.pct(.99)), msf(r.receipt.max()), strconvI(r.receiptMissing),
				msf(r.gen.late.pct(.99)), msf(r.gen.late.max()), strconvI(r.gen.errors),
				msf(r.progressLag.pct(.5)), msf(r.progressLag.pct(.99)), msf(r.progressLag.max()),
				msf(r.finalLag.pct(.5)), msf(r.finalLag.pct(.99)), msf(r.finalLag.max()),
				f3(r.completion.pct(.5).Seconds()), f3(r.completion.pct(.99).Seconds()), f3(r.completion.max().Seconds()), f3((r.completion.pct(.99) - r.answer).Seconds()),
				fmt.Sprint(r.quota), fmt.Sprint(r.expired), fmt.Sprint(r.invalid), strconvI(r.maxPer60), strconvI(r.heartbeats), strconvI(r.framesTotal),
				f3(r.throughput), f3(r.wall.Seconds()), f3(r.otherCores()),
				role, f3(u.CPU.Seconds()), f3(r.cores(role)), f3(r.perMsg(role)), f3(r.idleCores(role)), f3(r.marginalPerMsg(role)), f1(float64(u.PeakRSS) / 1024)})
		}
	}
	w.Flush()
	return w.Error()
}

func strconvI(i int) string      { return fmt.Sprint(i) }
func f1(v float64) string        { return fmt.Sprintf("%.1f", v) }
func f3(v float64) string        { return fmt.Sprintf("%.3f", v) }
func msf(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// shellJoin joins args for a command line a reader can paste: an argument
// with a space or a quote in it is single-quoted.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = a
		if a == "" || strings.ContainsAny(a, " \t'\"$") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
