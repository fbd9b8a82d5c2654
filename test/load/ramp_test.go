package main

import (
	"os"
	"path/filepath"
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
// receipt seen, and the report, CSV and plots written. It asserts no
// timing: figures are for the benchmark.
func TestRampSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes (about 40 s)")
	}
	steps, err := parseSteps(smokeSteps)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := runRamp(steps, rampOpts{grace: 30 * time.Second, idle: time.Second, tick: time.Second, profHz: 99, logf: t.Logf, self: self}, t.TempDir())
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
	if rep := rampReport("test", rs); len(rep) < 1000 {
		t.Errorf("report too short: %q", rep)
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
