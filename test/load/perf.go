package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// perfSet is one `perf record` per profiled process: Linux perf samples a
// running process from outside (Go keeps frame pointers, so call stacks
// resolve without any change to the binary). Best effort: without perf,
// or without the permission to use it, the step runs unprofiled.
type perfSet struct {
	runs map[string]*exec.Cmd
	data map[string]string
	logf func(string, ...any)
}

// profiledRole says whether a role is worth a profile: the leader, one
// worker, one etcd member, one NATS server, the naive bot. seen holds the
// groups profiled so far; roles come in sorted order, so on r3 it is
// etcd e1 and nats n1 (a member, not necessarily the raft or stream
// leader).
func profiledRole(role string, seen map[string]bool) bool {
	if strings.HasPrefix(role, "leader") || role == "naive bot" {
		return true
	}
	for _, group := range []string{"worker", etcdRole, natsRole} {
		if memberOf(role, group) && !seen[group] {
			seen[group] = true
			return true
		}
	}
	return false
}

func startPerf(pids map[string]int, dir string, hz int, logf func(string, ...any)) *perfSet {
	ps := &perfSet{runs: map[string]*exec.Cmd{}, data: map[string]string{}, logf: logf}
	if _, err := exec.LookPath("perf"); err != nil {
		logf("perf not found: step not profiled")
		return ps
	}
	seen := map[string]bool{}
	for _, role := range sortedKeys(pids) {
		if !profiledRole(role, seen) {
			continue
		}
		out := filepath.Join(dir, "perf-"+strings.ReplaceAll(role, " ", "-")+".data")
		cmd := exec.Command("perf", "record", "-q", "-F", strconv.Itoa(hz), "-g", "-p", strconv.Itoa(pids[role]), "-o", out)
		if err := cmd.Start(); err != nil {
			logf("perf record %s: %v", role, err)
			continue
		}
		ps.runs[role], ps.data[role] = cmd, out
	}
	return ps
}

// stop ends every recording and returns role → a text summary.
func (ps *perfSet) stop() map[string]string {
	for _, cmd := range ps.runs {
		cmd.Process.Signal(syscall.SIGINT)
	}
	out := map[string]string{}
	for role, cmd := range ps.runs {
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		focus, name := "botctl/botctl", "botctl"
		switch {
		case memberOf(role, etcdRole):
			focus, name = "go.etcd.io/etcd", "etcd"
		case memberOf(role, natsRole):
			focus, name = "nats-io/nats-server", "nats-server"
		}
		s, err := perfSummary(ps.data[role], focus, name)
		if err != nil {
			ps.logf("perf report %s: %v", role, err)
			continue
		}
		out[role] = s
	}
	return out
}

// perfSummary is a profile's CPU by Go package (self time) and its top
// functions, self and cumulative (children; only those whose name
// contains focus, the program's own code).
func perfSummary(data, focus, name string) (string, error) {
	self, total, err := perfSymbols(data, "--no-children")
	if err != nil {
		return "", err
	}
	cum, _, err := perfSymbols(data, "--children")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d samples.\n\nSelf time by package:\n\n", total)
	byPkg := map[string]float64{}
	for _, s := range self {
		byPkg[goPackage(s.sym)] += s.pct
	}
	type kv struct {
		k string
		v float64
	}
	var pk []kv
	for k, v := range byPkg {
		pk = append(pk, kv{k, v})
	}
	sort.Slice(pk, func(i, j int) bool { return pk[i].v > pk[j].v })
	for i, p := range pk {
		if i >= 12 || p.v < 1 {
			break
		}
		fmt.Fprintf(&b, "    %5.1f%%  %s\n", p.v, p.k)
	}
	b.WriteString("\nTop functions, self:\n\n")
	for i, s := range self {
		if i >= 15 {
			break
		}
		fmt.Fprintf(&b, "    %5.1f%%  %s\n", s.pct, s.sym)
	}
	fmt.Fprintf(&b, "\nTop %s functions, cumulative (with callees):\n\n", name)
	n := 0
	for _, s := range cum {
		if !strings.Contains(s.sym, focus) {
			continue
		}
		fmt.Fprintf(&b, "    %5.1f%%  %s\n", s.pct, s.sym)
		if n++; n >= 20 {
			break
		}
	}
	return b.String(), nil
}

type perfSym struct {
	pct float64
	sym string
}

// perfSymbols runs perf report sorted by symbol and parses its lines
// ("  12.34%  12.34%  comm  dso  [.] symbol" with --children, one
// percentage without).
func perfSymbols(data, mode string) ([]perfSym, int, error) {
	cmd := exec.Command("perf", "report", "-i", data, "--stdio", mode, "-g", "none", "--sort", "sym", "--percent-limit", "0.3")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %s", err, stderr.String())
	}
	var out []perfSym
	total := 0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "# Samples:") {
			f := strings.Fields(line)
			if len(f) >= 3 {
				v := strings.TrimSuffix(f[2], "K")
				n, _ := strconv.ParseFloat(v, 64)
				if strings.HasSuffix(f[2], "K") {
					n *= 1000
				}
				total += int(n)
			}
		}
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 || !strings.HasSuffix(f[0], "%") {
			continue
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
		if err != nil {
			continue
		}
		i := strings.Index(line, "] ")
		if i < 0 {
			continue
		}
		sym := strings.TrimSpace(line[i+2:])
		if strings.Contains(line[:i+1], "[k") {
			sym = "[kernel] " + sym
		}
		out = append(out, perfSym{pct, sym})
	}
	return out, total, nil
}

// goPackage is the package part of a Go symbol ("runtime.mallocgc" →
// "runtime", "github.com/nats-io/nats-server/v2/server.(*stream).x" →
// "github.com/nats-io/nats-server/v2/server"); other symbols (kernel,
// C) are grouped as they are.
func goPackage(sym string) string {
	if strings.HasPrefix(sym, "[kernel]") {
		return "[kernel]"
	}
	if strings.HasPrefix(sym, "0x") {
		return "[unknown]"
	}
	slash := strings.LastIndexByte(sym, '/')
	rest := sym[slash+1:]
	if dot := strings.IndexByte(rest, '.'); dot >= 0 {
		return sym[:slash+1+dot]
	}
	return "[kernel/other]"
}
