package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var pprofSink [][]byte

//go:noinline
func allocateBeforeTheWindow() {
	for range 2000 {
		pprofSink = append(pprofSink, make([]byte, 16<<10))
	}
	pprofSink = nil
}

//go:noinline
func allocateInTheWindow() {
	for range 2000 {
		pprofSink = append(pprofSink, make([]byte, 16<<10))
	}
	pprofSink = nil
}

// spinSink keeps spinInTheWindow's work from being optimized away.
var spinSink int

//go:noinline
func spinInTheWindow(d time.Duration) int {
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := range 100000 {
			n += i % 7
		}
	}
	return n
}

// A profiled step's pprofSet takes the window's profiles of the roles
// profiledRole picks, from a profiler behind a token (as a node's API
// is): the CPU spent in the window, and the allocations made in it, not
// those made before. In-process: this test's own profiler.
func TestPprofSetTakesTheWindowsProfiles(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	defer srv.Close()
	targets := map[string]pprofTarget{
		"leader n1": {base: srv.URL + "/debug/pprof/", token: "tok"},
		"sim":       {base: "http://127.0.0.1:1/debug/pprof/"}, // not a profiled role: never asked
	}
	out := filepath.Join(t.TempDir(), "ramp-prof")
	allocateBeforeTheWindow()
	ps := startPprof(targets, out, t.TempDir(), "step2", t.Logf)
	allocateInTheWindow()
	spinSink = spinInTheWindow(2 * time.Second)
	ps.endWindow()
	got := ps.finish()
	if len(got) != 1 {
		t.Fatalf("profiled %v, want the leader only", sortedKeys(got))
	}
	p := got["leader n1"]
	if p.err != "" {
		t.Fatal(p.err)
	}
	for _, f := range []string{filepath.Join(out, "step2-leader-n1-cpu.pb.gz"), filepath.Join(out, "step2-leader-n1-allocs.pb.gz")} {
		if f != p.cpuFile && f != p.allocFile {
			t.Errorf("%s not among the files %q, %q", f, p.cpuFile, p.allocFile)
		}
		if err := checkGzip(f); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(p.cpuTop, "spinInTheWindow") {
		t.Errorf("the window's CPU profile does not show spinInTheWindow:\n%s", p.cpuTop)
	}
	if !strings.Contains(p.allocTop, "allocateInTheWindow") || strings.Contains(p.allocTop, "allocateBeforeTheWindow") {
		t.Errorf("the window's allocations should show allocateInTheWindow and not allocateBeforeTheWindow:\n%s", p.allocTop)
	}
	rep := pprofSection([]*stepResult{{step: step{spec: "1@1/1s+", kind: "botctl", nodes: 3, profile: true, conversations: 1, rate: 1, answer: time.Second},
		wall: time.Second, pprof: got}})
	for _, want := range []string{"ramp-prof/step2-leader-n1-cpu.pb.gz", "ramp-prof/step2-leader-n1-allocs.pb.gz", "allocateInTheWindow", "go tool pprof -http=: FILE"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "step2-sim-cpu.pb.gz")); err == nil {
		t.Error("sim was profiled")
	}
}
