package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	proc "github.com/botctl/botctl/test/e2e/cluster"
)

// pprofChunk is the length of one CPU profile request. A CPU profile is
// asked for a fixed number of seconds, and a step's window ends when its
// last answer is in, which nobody knows ahead: the profile is taken in
// chunks from the window's start until it ends, and merged. The last
// chunk runs on past the window's end by up to this much (the processes
// are near idle then), and the step waits for it.
const pprofChunk = 5 * time.Second

// pprofTarget is a process that serves Go's profiler: base is its
// /debug/pprof/ URL, token the bearer token it asks for ("": none).
type pprofTarget struct {
	base  string
	token string
}

// pprofResult is one profiled process's profiles of a step: the files as
// the report names them (beside the report) and the top functions.
type pprofResult struct {
	cpuFile, allocFile string
	cpuTop, allocTop   string
	err                string
}

// pprofSet takes, over a step's window, a CPU profile and an allocation
// profile of each process profiledRole picks, from the process's own
// net/http/pprof: the nodes with --api-pprof, nats-server on its
// ProfPort, etcd with --enable-pprof, the load binary's children on a
// port of their own. It sees what the Go runtime sees (every goroutine's
// Go stack, the allocations), not the kernel: perf does that.
type pprofSet struct {
	roles   map[string]pprofTarget
	prefix  string // "step3"
	out     string // the files' directory
	tmp     string // the chunks and the window's first allocation profiles
	logf    func(string, ...any)
	client  *http.Client
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	chunks  map[string][]string // role → CPU chunk files, in order
	allocs0 map[string]string   // role → allocs at the window's start
	allocs1 map[string]string   // role → allocs at its end
	errs    map[string][]string
}

// startPprof takes each picked process's allocation profile (the window's
// start) and starts its CPU profile. out gets the files, tmp the parts.
func startPprof(targets map[string]pprofTarget, out, tmp, prefix string, logf func(string, ...any)) *pprofSet {
	ps := &pprofSet{roles: map[string]pprofTarget{}, prefix: prefix, out: out, tmp: tmp, logf: logf,
		client: &http.Client{Timeout: pprofChunk + time.Minute}, stop: make(chan struct{}),
		chunks: map[string][]string{}, allocs0: map[string]string{}, allocs1: map[string]string{}, errs: map[string][]string{}}
	seen := map[string]bool{}
	for _, role := range sortedKeys(targets) {
		if profiledRole(role, seen) {
			ps.roles[role] = targets[role]
		}
	}
	ps.snapshotAllocs(ps.allocs0, "start")
	for role, t := range ps.roles {
		ps.wg.Add(1)
		go func() {
			defer ps.wg.Done()
			ps.cpuLoop(role, t)
		}()
	}
	return ps
}

// fileName is role's file of kind in dir: "step3-leader-n1-cpu.pb.gz".
func (ps *pprofSet) fileName(dir, role, kind string) string {
	return filepath.Join(dir, ps.prefix+"-"+strings.ReplaceAll(role, " ", "-")+"-"+kind+".pb.gz")
}

func (ps *pprofSet) fail(role string, format string, args ...any) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.errs[role] = append(ps.errs[role], fmt.Sprintf(format, args...))
}

// snapshotAllocs writes every role's allocation profile into into. A
// forced GC first (heap?gc=1): the allocs profile counts up to the last
// completed GC, which in a quiet process may be minutes old.
func (ps *pprofSet) snapshotAllocs(into map[string]string, when string) {
	var wg sync.WaitGroup
	for role, t := range ps.roles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ps.get(context.Background(), t, "heap?gc=1", io.Discard); err != nil {
				ps.fail(role, "allocs at the window's %s: %v", when, err)
				return
			}
			f := ps.fileName(ps.tmp, role, "allocs-"+when)
			if err := ps.getFile(context.Background(), t, "allocs", f); err != nil {
				ps.fail(role, "allocs at the window's %s: %v", when, err)
				return
			}
			ps.mu.Lock()
			into[role] = f
			ps.mu.Unlock()
		}()
	}
	wg.Wait()
}

// cpuLoop takes role's CPU profile chunk after chunk until stop.
func (ps *pprofSet) cpuLoop(role string, t pprofTarget) {
	for i := 0; ; i++ {
		select {
		case <-ps.stop:
			return
		default:
		}
		f := ps.fileName(ps.tmp, role, fmt.Sprintf("cpu-%03d", i))
		if err := ps.getFile(context.Background(), t, fmt.Sprintf("profile?seconds=%d", int(pprofChunk/time.Second)), f); err != nil {
			ps.fail(role, "CPU profile: %v", err)
			return
		}
		ps.mu.Lock()
		ps.chunks[role] = append(ps.chunks[role], f)
		ps.mu.Unlock()
	}
}

func (ps *pprofSet) get(ctx context.Context, t pprofTarget, path string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.base+path, nil)
	if err != nil {
		return err
	}
	if t.token != "" {
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	resp, err := ps.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", t.base+path, resp.Status, strings.TrimSpace(string(b)))
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

func (ps *pprofSet) getFile(ctx context.Context, t pprofTarget, path, file string) error {
	var b bytes.Buffer
	if err := ps.get(ctx, t, path, &b); err != nil {
		return err
	}
	return os.WriteFile(file, b.Bytes(), 0o644)
}

// endWindow takes the window's last allocation profiles and lets the CPU
// profiles end with their current chunk.
func (ps *pprofSet) endWindow() {
	ps.snapshotAllocs(ps.allocs1, "end")
	close(ps.stop)
}

// finish waits for the CPU profiles, writes each role's two files (the
// chunks merged; the end's allocations minus the start's) and returns
// role → its files and top functions.
func (ps *pprofSet) finish() map[string]pprofResult {
	ps.wg.Wait()
	if err := os.MkdirAll(ps.out, 0o755); err != nil {
		ps.logf("pprof: %v", err)
		return nil
	}
	out := map[string]pprofResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for role := range ps.roles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := ps.files(role)
			if r.err != "" {
				ps.logf("pprof %s: %s", role, r.err)
			}
			mu.Lock()
			out[role] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// files writes role's two files and reads their top functions.
func (ps *pprofSet) files(role string) pprofResult {
	var r pprofResult
	var errs []string
	if chunks := ps.chunks[role]; len(chunks) > 0 {
		f := ps.fileName(ps.out, role, "cpu")
		if err := goPprof(append([]string{"-proto", "-output", f}, chunks...)...); err != nil {
			errs = append(errs, "merging the CPU profile: "+err.Error())
		} else if r.cpuTop, err = pprofTop(f, ""); err != nil {
			errs = append(errs, err.Error())
		} else {
			r.cpuFile = f
		}
	} else if len(ps.errs[role]) == 0 {
		errs = append(errs, "no CPU profile taken")
	}
	if a0, a1 := ps.allocs0[role], ps.allocs1[role]; a0 != "" && a1 != "" {
		f := ps.fileName(ps.out, role, "allocs")
		if err := goPprof("-proto", "-output", f, "-base", a0, a1); err != nil {
			errs = append(errs, "the window's allocations (-base): "+err.Error())
		} else if r.allocTop, err = pprofTop(f, "alloc_space"); err != nil {
			errs = append(errs, err.Error())
		} else {
			r.allocFile = f
		}
	}
	r.err = strings.Join(append(ps.errs[role], errs...), "; ")
	return r
}

// goPprof runs `go tool pprof` with args (symbols are in Go's profiles:
// no binary is looked for).
func goPprof(args ...string) error {
	_, err := goPprofOutput(args...)
	return err
}

func goPprofOutput(args ...string) (string, error) {
	cmd := exec.Command("go", append([]string{"tool", "pprof", "-symbolize=none"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go tool pprof %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// pprofIgnore leaves the profiler's own work out of the report's tables:
// each CPU chunk allocates its buffers and gzips its profile, about 7 MB a
// chunk, which in a quiet process is most of what it allocates.
const pprofIgnore = `runtime/pprof\.|net/http/pprof\.`

// pprofTop is `go tool pprof -top` of file's 15 heaviest functions by
// flat value (sampleIndex "": the profile's default, CPU time), the
// profiler's own work left out (pprofIgnore), without the lines about the
// file, build and time.
func pprofTop(file, sampleIndex string) (string, error) {
	args := []string{"-top", "-nodecount=15", "-ignore=" + pprofIgnore}
	if sampleIndex != "" {
		args = append(args, "-sample_index="+sampleIndex)
	}
	raw, err := goPprofOutput(append(args, file)...)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, l := range strings.SplitAfter(raw, "\n") {
		if strings.HasPrefix(l, "File: ") || strings.HasPrefix(l, "Build ID: ") || strings.HasPrefix(l, "Time: ") {
			continue
		}
		b.WriteString(l)
	}
	return b.String(), nil
}

// servePprof serves Go's profiler on a loopback port of its own and prints
// "pprof: URL" before the child's ready line, for the ramp's profiles of
// the load binary's children (etcd, NATS, the naive bot). No token: test
// scaffolding, on loopback.
func servePprof() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("pprof listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go http.Serve(ln, mux)
	fmt.Printf("pprof: http://%s/debug/pprof/\n", ln.Addr())
	return nil
}

// childPprof is where a child started with -pprof serves its profiler
// (its "pprof: URL" line, printed before its ready line).
func childPprof(p *proc.Proc) (pprofTarget, error) {
	l, err := p.WaitStdout("pprof: ", 10*time.Second)
	if err != nil {
		return pprofTarget{}, err
	}
	return pprofTarget{base: strings.TrimSpace(strings.TrimPrefix(l.Text, "pprof: "))}, nil
}

// pprofSection is the report's part on the pprof profiles of "+" steps:
// per step and process, the top functions by CPU and by bytes allocated
// over the window, and the files to open.
func pprofSection(rs []*stepResult) string {
	var b strings.Builder
	for i, r := range rs {
		if len(r.pprof) == 0 {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "\n## Profiles (pprof: each process's own, over the step's window)\n\n"+
				"Taken from the processes' own `net/http/pprof` (the nodes started with `--api-pprof true`, asked with their API token; nats-server on its `ProfPort`; etcd with `--enable-pprof`; the load binary's children, the naive bot among them, on a port of their own): "+
				"**CPU** sampled at 100 Hz from the window's start, in %s chunks merged into one (the last runs past the window's end by up to %s, when the processes are near idle); "+
				"**allocations** = the allocation profile at the window's end minus the one at its start (`go tool pprof -base`), each taken after a forced GC, so they are the window's: `alloc_space` is the bytes allocated (flat: in the function itself). "+
				"The tables leave out the profiler's own work (`-ignore='%s'`: each chunk's buffers and gzip, some 7 MB a chunk), so their percentages are of the whole, profiler included; the files have it all. "+
				"Go's view: a function's time includes the kernel's under its system calls (perf, above, splits those). "+
				"Open a file with `go tool pprof -http=: FILE` (graph, flame graph, source), or `go tool pprof -top FILE` (`-sample_index=alloc_space` or `alloc_objects` for the allocations; their `inuse_*` are the live heap's change, not its size).\n",
				pprofChunk, pprofChunk, pprofIgnore)
		}
		fmt.Fprintf(&b, "\n### Step %d: %s, %d conversations at %.0f/s, %s answers\n", i+1, r.label(), r.conversations, r.rate, r.answer)
		for _, role := range sortedKeys(r.pprof) {
			p := r.pprof[role]
			fmt.Fprintf(&b, "\n#### %s (%.2f cores, %.2f ms CPU per message)\n\n", role, r.cores(role), r.perMsg(role))
			if p.err != "" {
				fmt.Fprintf(&b, "Not all profiled: %s\n\n", p.err)
			}
			for _, x := range []struct{ what, file, top string }{
				{"CPU, top 15 by flat time", p.cpuFile, p.cpuTop},
				{"allocated bytes (alloc_space), top 15 by flat bytes", p.allocFile, p.allocTop},
			} {
				if x.file == "" {
					continue
				}
				fmt.Fprintf(&b, "<details><summary>%s: %s</summary>\n\n```\n%s```\n</details>\n\n", x.what, besideReport(x.file), x.top)
			}
		}
	}
	return b.String()
}

// besideReport is a profile's file as the report names it: relative to
// the report, in the BASE-prof directory beside it.
func besideReport(file string) string {
	return filepath.Base(filepath.Dir(file)) + "/" + filepath.Base(file)
}
