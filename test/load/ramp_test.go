package main

import (
	"compress/gzip"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be its own children: the ramp starts
// etcd, NATS and the naive bot by running os.Executable() with a command
// ("etcd", "nats", "naive"), which under `go test` is this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		var err error
		switch os.Args[1] {
		case "etcd":
			err = etcdMain(os.Args[2:])
		case "nats":
			err = natsMain(os.Args[2:])
		case "naive":
			err = naiveMain(os.Args[2:])
		default:
			os.Exit(m.Run())
		}
		if err != nil {
			os.Stderr.WriteString("load: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRampSmoke runs the -smoke ramp (50 conversations at 10/s, 5 s
// answers, on three real nodes, then the naive bot) and checks that it
// measured something whole: every conversation answered once, every
// receipt seen, the report, CSV and plots written, and both steps'
// profiles ("+") written and in the report. It asserts no timing:
// figures are for the benchmark.
func TestRampSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes (about 50 s)")
	}
	rampSmoke(t, smokeSteps, topologySingle)
}

// smokeStepsR3 is the r3 smoke's ramp: the botctl step of smokeSteps
// only (the naive bot runs on no etcd and no NATS), profiled: an etcd
// member's and a NATS server's own profilers (infranode -pprof,
// -prof-port).
const smokeStepsR3 = "50@10/5s+"

// TestRampSmokeR3 is TestRampSmoke on the production topology (-topology
// r3): 3 etcd members and 3 NATS servers, the nodes at --nats-replicas 3.
// Besides the smoke's checks, every member is measured and the report
// says what ran.
func TestRampSmokeR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes: 6 etcd and NATS members, 3 nodes (about 30 s)")
	}
	rs, rep := rampSmoke(t, smokeStepsR3, topologyR3)
	for _, r := range rs {
		var etcd, nats int
		for _, role := range r.roles() {
			u := r.usage[role]
			switch {
			case memberOf(role, etcdRole):
				etcd++
			case memberOf(role, natsRole):
				nats++
			default:
				continue
			}
			if u.CPU == 0 && u.PeakRSS == 0 {
				t.Errorf("step %s: no CPU or RSS read for %s", r.spec, role)
			}
		}
		if etcd != 3 || nats != 3 {
			t.Errorf("step %s: %d etcd and %d NATS members measured, want 3 and 3: %v", r.spec, etcd, nats, r.roles())
		}
	}
	for _, want := range []string{"- topology: r3: 3 etcd members, 3 NATS servers, JetStream replicas 3", "`nats.replicas` 3", "`--nats-replicas 3`", "etcd ×3 cores, sum (idle)"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report does not say %q:\n%s", want, rep)
		}
	}
}

// rampSmoke runs steps on topo with short waits, checks every step, writes
// the CSV and plots, and returns the results and the report.
func rampSmoke(t *testing.T, stepsSpec string, topo topology) ([]*stepResult, string) {
	t.Helper()
	steps, err := parseSteps(stepsSpec)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// No perf (profHz 0): pprof's profiles are what is checked, and the
	// test should not depend on perf being installed or take its time.
	profDir := filepath.Join(t.TempDir(), "ramp-prof")
	rs, err := runRamp(steps, rampOpts{grace: 30 * time.Second, idle: time.Second, logf: t.Logf, self: self, topology: topo, profDir: profDir}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(steps) {
		t.Fatalf("%d steps measured, want %d", len(rs), len(steps))
	}
	for _, r := range rs {
		if r.answered != r.conversations || r.lost != 0 || r.dup != 0 || r.receiptMissing != 0 {
			t.Errorf("step %s: answered %d/%d, lost %d, duplicated %d, receipts missing %d", r.spec, r.answered, r.conversations, r.lost, r.dup, r.receiptMissing)
		}
		if r.gen.errors != 0 || r.err != "" {
			t.Errorf("step %s: %d posts failed (%s), error %q", r.spec, r.gen.errors, r.gen.firstErr, r.err)
		}
		if r.usage["sim"].CPU == 0 && r.usage["sim"].PeakRSS == 0 {
			t.Errorf("step %s: no CPU or RSS read for the simulator: %+v", r.spec, r.usage)
		}
	}
	if rs[0].kind != "botctl" || len(rs[0].progressLag)+len(rs[0].finalLag) == 0 {
		t.Errorf("botctl step: no push lag measured (%d output versions seen)", rs[0].versions)
	}
	dir := t.TempDir()
	base := filepath.Join(dir, "ramp")
	if err := writeRampCSV(base+".csv", rs); err != nil {
		t.Fatal(err)
	}
	if err := rampPlots(base, rs); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{base + ".csv", base + "-receipt.png", base + "-pushlag.png"} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	rep := rampReport("test", topo, "always", nil, rs)
	if len(rep) < 1000 {
		t.Errorf("report too short: %q", rep)
	}
	for _, r := range rs {
		checkProfiles(t, r, topo, rep) // every smoke step is a "+" step
	}
	return rs, rep
}

// checkProfiles checks a "+" step's pprof profiles: one CPU and one
// allocation profile of each process profiledRole picks, each a whole
// gzip file, and the report showing each one's top functions.
func checkProfiles(t *testing.T, r *stepResult, topo topology, rep string) {
	t.Helper()
	want := []string{"naive bot"}
	if r.kind == "botctl" {
		etcd, nats := etcdRole, natsRole
		if topo == topologyR3 {
			etcd, nats = etcdRole+" e1", natsRole+" n1"
		}
		want = []string{"leader " + r.leader, etcd, nats}
		var workers []string
		for _, role := range r.roles() {
			if strings.HasPrefix(role, "worker ") {
				workers = append(workers, role)
			}
		}
		if len(workers) > 0 {
			want = append(want, workers[0]) // roles() sorts them
		}
	}
	if len(r.pprof) != len(want) {
		t.Errorf("step %s: profiled %v, want %v", r.spec, sortedKeys(r.pprof), want)
	}
	for _, role := range want {
		p, ok := r.pprof[role]
		if !ok {
			t.Errorf("step %s: %s not profiled (profiled: %v)", r.spec, role, sortedKeys(r.pprof))
			continue
		}
		if p.err != "" {
			t.Errorf("step %s, %s: %s", r.spec, role, p.err)
		}
		for _, f := range []string{p.cpuFile, p.allocFile} {
			if f == "" {
				t.Errorf("step %s, %s: a profile is missing: %+v", r.spec, role, p)
				continue
			}
			if err := checkGzip(f); err != nil {
				t.Errorf("step %s, %s: %v", r.spec, role, err)
			}
			if !strings.Contains(rep, besideReport(f)) {
				t.Errorf("report does not name %s", besideReport(f))
			}
		}
		if !strings.Contains(p.cpuTop, "Type: cpu") || !strings.Contains(p.allocTop, "Type: alloc_space") || !strings.Contains(p.allocTop, "flat%") {
			t.Errorf("step %s, %s: top functions not read:\nCPU:\n%s\nallocations:\n%s", r.spec, role, p.cpuTop, p.allocTop)
		}
		if !strings.Contains(rep, p.allocTop) || !strings.Contains(rep, p.cpuTop) {
			t.Errorf("report lacks %s's tables", role)
		}
	}
	if !strings.Contains(rep, "## Profiles (pprof") || !strings.Contains(rep, "allocated bytes (alloc_space)") {
		t.Errorf("report has no pprof section:\n%s", rep)
	}
}

// checkGzip says whether file is a whole gzip stream (a profile as
// pprof writes it).
func checkGzip(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	n, err := io.Copy(io.Discard, z)
	if err != nil || n == 0 {
		return fmt.Errorf("%s: %d bytes unzipped, %v", file, n, err)
	}
	return nil
}

// TestRampReportSumsMembers checks the CPU table on r3 without
// processes: etcd's and NATS's columns are their members summed, RSS with
// the largest member beside it, and the header names the topology.
func TestRampReportSumsMembers(t *testing.T) {
	r := &stepResult{step: step{spec: "10@1/1s", kind: "botctl", nodes: 3, conversations: 10, rate: 1, answer: time.Second},
		leader: "n1", wall: 10 * time.Second, usage: map[string]usage{"leader n1": {CPU: time.Second, PeakRSS: 1024}}}
	for i, m := range []string{"e1", "e2", "e3"} {
		r.usage["etcd "+m] = usage{CPU: time.Second, PeakRSS: int64(i+1) * 100 * 1024}
	}
	for _, m := range []string{"n1", "n2", "n3"} {
		r.usage["nats "+m] = usage{CPU: 2 * time.Second, PeakRSS: 50 * 1024}
	}
	rep := rampReport("test", topologyR3, "always", nil, []*stepResult{r})
	// etcd: 3 s over 10 s, 300 ms per message, 600 MB (300 MB the largest);
	// NATS: 6 s, 600 ms per message, 150 MB (50 MB).
	for _, want := range []string{"| 0.30 (0.00) | 300.0 (300.0) | 600 MB (300 MB) | 0.60 (0.00) | 600.0 (600.0) | 150 MB (50 MB) |",
		"JetStream replicas 3", "`nats.replicas` 3"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	single := rampReport("test", topologySingle, "always", nil, nil)
	if !strings.Contains(single, "- topology: single: 1 etcd member, 1 NATS server, JetStream replicas 1") || !strings.Contains(single, "`nats.replicas` 1") {
		t.Errorf("single report does not state its topology:\n%s", single)
	}
}

// TestRampReportNamesNodeArgs: a ramp run with -node-args is not on the
// default configuration, and its report says so, with a command a reader
// can paste again.
func TestRampReportNamesNodeArgs(t *testing.T) {
	if rep := rampReport("test", topologyR3, "always", nil, nil); strings.Contains(rep, "not the default configuration") {
		t.Errorf("a default run's report says it is not on the default configuration:\n%s", rep)
	}
	rep := rampReport("test", topologyR3, "always", []string{"--worker-output-interval", "1m"}, nil)
	if !strings.Contains(rep, "**not the default configuration**: every botctl node also ran with `--worker-output-interval 1m`") {
		t.Errorf("report does not name the extra node flags:\n%s", rep)
	}
	got := shellJoin([]string{"-node-args", "--worker-output-interval 1m", "-idle", "it's", ""})
	if want := `-node-args '--worker-output-interval 1m' -idle 'it'\''s' ''`; got != want {
		t.Errorf("shellJoin = %s, want %s", got, want)
	}
}

func TestParseSteps(t *testing.T) {
	st, err := parseSteps("100@10/120s, naive:1000@200/60s+,1node:3000@500/5s")
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 3 || st[0].nodes != 3 || st[0].conversations != 100 || st[0].rate != 10 || st[0].answer != 2*time.Minute ||
		st[1].kind != "naive" || !st[1].profile || st[1].spec != "naive:1000@200/60s" || st[2].nodes != 1 || st[2].answer != 5*time.Second {
		t.Errorf("parsed %+v", st)
	}
	for _, bad := range []string{"100", "100@x/1s", "0@1/1s", "3node100@1/1s", "x:1@1/1s", "1@1/0s"} {
		if _, err := parseSteps(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := parseSteps(defaultSteps); err != nil {
		t.Errorf("defaultSteps: %v", err)
	}
}

// The histogram quantile interpolates inside the bucket the rank falls
// in, as Prometheus's histogram_quantile does.
func TestHistogramQuantile(t *testing.T) {
	h := histogram{bounds: []float64{0.001, 0.002, 0.004, math.Inf(1)}, counts: []float64{0, 50, 100, 100}}
	if got := h.quantile(0.5); got != 0.002 {
		t.Fatalf("p50 = %v, want 0.002", got)
	}
	if got := h.quantile(0.75); math.Abs(got-0.003) > 1e-12 {
		t.Fatalf("p75 = %v, want 0.003", got)
	}
	if got := h.quantile(0.25); math.Abs(got-0.0015) > 1e-12 {
		t.Fatalf("p25 = %v, want 0.0015", got)
	}
	if got := (histogram{}).quantile(0.5); !math.IsNaN(got) {
		t.Fatalf("empty: %v", got)
	}
}

// The growth series is the 500/s three-node steps of the answer time most
// of them share: the default ramp's backlog step (2000@500/5s) has the
// shortest answers and must not hide the 1,000/5,000/10,000 series.
func TestGrowthSeriesIgnoresTheBacklogStep(t *testing.T) {
	var rs []*stepResult
	for _, spec := range []string{"1000@500/30s", "5000@500/30s", "10000@500/30s", "2000@500/5s", "1node:2000@500/5s"} {
		st, err := parseSteps(spec)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, &stepResult{step: st[0], usage: map[string]usage{}})
	}
	if got := rs2answer(rs); got != 30*time.Second {
		t.Fatalf("growth series answer time %s, want 30s", got)
	}
	if s := costSection(rs); !strings.Contains(s, "### Growth from 1000 to 10000 conversations") {
		t.Fatalf("no growth table:\n%s", s)
	}
}
