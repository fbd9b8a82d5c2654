// Package cluster runs real botctl processes (infra, sim, serve nodes) for
// the end-to-end tests in test/e2e and the failover benchmark in
// test/failover. Every process runs in its own process group and is killed
// with it on Close; on Linux the kernel also kills it if this process dies.
package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/pkg/infra"
)

// RepoRoot is the directory of the botctl go.mod (found with `go env GOMOD`).
func RepoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside the botctl module")
	}
	return filepath.Dir(mod), nil
}

// Build compiles ./cmd/botctl into dir and returns the binary's path.
func Build(dir string) (string, error) { return BuildPackage(dir, "./cmd/botctl", "botctl") }

// BuildPackage compiles the main package pkg (relative to the repository
// root, e.g. "./test/infracluster/infranode") into dir/name and returns its path.
func BuildPackage(dir, pkg, name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	if out, err := testenv.GoBuild(root, "-o", bin, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// BuildVersion compiles ./cmd/botctl from the working tree into dir/name,
// stamped with version and the commit as make build stamps a release: two
// builds of the code under test that other nodes see as an older and a
// newer release, registered as a release registers ("0.91.0 (abc…)").
func BuildVersion(dir, version, name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse HEAD: %w", err)
	}
	bin := filepath.Join(dir, name)
	cmd := testenv.GoBuild(root, "-ldflags", stamp(version, strings.TrimSpace(string(head))), "-o", bin, "./cmd/botctl")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", version, err, out)
	}
	return bin, nil
}

// stamp is the -ldflags that stamp a build's version and commit, as make
// build stamps a release.
func stamp(version, commit string) string {
	const pkg = "github.com/botctl/botctl/pkg/buildinfo."
	return "-X " + pkg + "Version=" + version + " -X " + pkg + "Commit=" + commit
}

// BuildCommit compiles ./cmd/botctl as it was at commit (a hash or a ref
// of the repository's history) into dir/name, from a copy of that commit's
// tree (git archive), stamped with version as make build stamps a release.
// The copy shares the module cache, so only botctl's own packages compile.
func BuildCommit(dir, commit, version, name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	full, err := exec.Command("git", "-C", root, "rev-parse", "--verify", commit+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("commit %s is not in this clone's history (a shallow clone? fetch it): %w", commit, err)
	}
	hash := strings.TrimSpace(string(full))
	src := filepath.Join(dir, "src-"+hash[:12])
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, hash, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %w\n%s", hash, err, out)
	}
	bin := filepath.Join(dir, name)
	if out, err := testenv.GoBuild(src, "-ldflags", stamp(version, hash), "-o", bin, "./cmd/botctl").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build of %s: %w\n%s", hash, err, out)
	}
	return bin, nil
}

// FreePort returns "127.0.0.1:P" for a port that was free a moment ago
// (infra.FreeAddr: below the ephemeral range, so that no connection takes
// it before the process meant for it binds it).
func FreePort() (string, error) { return infra.FreeAddr() }

// Line is one line of a process's output and when it was read.
type Line struct {
	At   time.Time
	Text string
}

// maxStderr is how many stderr lines a Proc keeps (the newest).
const maxStderr = 2000

// Proc is a running child process whose stdout and stderr are read line by
// line as they come.
type Proc struct {
	Name string
	Args []string
	cmd  *exec.Cmd

	mu      sync.Mutex
	stdout  []Line
	stderr  []Line
	changed chan struct{} // closed and replaced on every new line and at exit
	done    chan struct{}
	state   *os.ProcessState
	waitErr error
	exitAt  time.Time
}

// StartOptions tune Start.
type StartOptions struct {
	// OnStderr, if set, is called for every stderr line as soon as it is
	// read, on the reading goroutine (keep it quick).
	OnStderr func(Line)
	Env      []string // added to the environment
	// LogFile, if set, gets every stderr line (appended, with the time it
	// was read): the whole log, where the Proc keeps only the newest.
	LogFile string
	// Bin, if set, is the binary a Cluster starts instead of Options.Bin
	// (StartProc takes its bin as an argument and ignores it).
	Bin string
}

// StartProc runs bin with args in its own process group.
func StartProc(name, bin string, args []string, o StartOptions) (*Proc, error) {
	p := &Proc{Name: name, Args: args, changed: make(chan struct{}), done: make(chan struct{})}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.SysProcAttr = sysProcAttr()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	// The log file opens first: a process started without it would be
	// left running when the open fails.
	var logFile *os.File
	if o.LogFile != "" {
		if logFile, err = os.OpenFile(o.LogFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err != nil {
			return nil, fmt.Errorf("%s: log file: %w", name, err)
		}
	}
	if err := cmd.Start(); err != nil {
		if logFile != nil {
			logFile.Close()
		}
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.cmd = cmd
	hook := o.OnStderr
	if logFile != nil {
		w := bufio.NewWriter(logFile)
		hook = func(l Line) {
			fmt.Fprintf(w, "%s %s\n", l.At.UTC().Format("15:04:05.000"), l.Text)
			w.Flush()
			if o.OnStderr != nil {
				o.OnStderr(l)
			}
		}
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); p.read(stdout, &p.stdout, nil, 0) }()
	go func() {
		defer readers.Done()
		p.read(stderr, &p.stderr, hook, maxStderr)
		if logFile != nil {
			logFile.Close()
		}
	}()
	go func() {
		readers.Wait() // Wait must not run before the pipes are drained
		err := cmd.Wait()
		at := time.Now()
		p.mu.Lock()
		p.state, p.waitErr, p.exitAt = cmd.ProcessState, err, at
		p.notifyLocked()
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

func (p *Proc) read(r io.Reader, into *[]Line, hook func(Line), keep int) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		l := Line{At: time.Now(), Text: sc.Text()}
		if hook != nil {
			hook(l)
		}
		p.mu.Lock()
		*into = append(*into, l)
		if keep > 0 && len(*into) > 2*keep {
			*into = append([]Line(nil), (*into)[len(*into)-keep:]...)
		}
		p.notifyLocked()
		p.mu.Unlock()
	}
	io.Copy(io.Discard, r)
}

func (p *Proc) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Pid is the process id (also its process group id).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// ExitedAt is when the process was reaped (zero while it runs).
func (p *Proc) ExitedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitAt
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// WaitStdout waits until a stdout line contains substr and returns it. The
// error names the process, says whether it exited, and ends with its stderr.
func (p *Proc) WaitStdout(substr string, timeout time.Duration) (Line, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen := 0
	for {
		p.mu.Lock()
		for ; seen < len(p.stdout); seen++ {
			if strings.Contains(p.stdout[seen].Text, substr) {
				l := p.stdout[seen]
				p.mu.Unlock()
				return l, nil
			}
		}
		ch, exited := p.changed, p.state != nil
		p.mu.Unlock()
		if exited {
			return Line{}, fmt.Errorf("%s exited (%v) before printing %q\nstdout:\n%s\nstderr:\n%s", p.Name, p.exitDesc(), substr, p.Stdout(), p.StderrTail(60))
		}
		select {
		case <-ch:
		case <-deadline.C:
			return Line{}, fmt.Errorf("%s did not print %q within %v\nstdout:\n%s\nstderr:\n%s", p.Name, substr, timeout, p.Stdout(), p.StderrTail(60))
		}
	}
}

// Stdout is everything the process printed to stdout so far.
func (p *Proc) Stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.stdout {
		b.WriteString(l.Text)
		b.WriteByte('\n')
	}
	return b.String()
}

// StderrTail is the last n lines of stderr.
func (p *Proc) StderrTail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ls := p.stderr
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.Text)
		b.WriteByte('\n')
	}
	return b.String()
}

// Stderr is all kept stderr (the last maxStderr..2*maxStderr lines).
func (p *Proc) Stderr() string { return p.StderrTail(1 << 30) }

// Signal sends sig to the process (not its group).
func (p *Proc) Signal(sig syscall.Signal) error {
	return syscall.Kill(p.Pid(), sig)
}

// Kill kills the whole process group with SIGKILL and waits for the exit
// (at most 10 s). Safe to call on an exited process.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		syscall.Kill(-p.Pid(), syscall.SIGKILL) // stray children, if any
		return
	default:
	}
	syscall.Kill(-p.Pid(), syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// Wait waits up to timeout for the exit and returns the exit code (-1 for a
// signal death).
func (p *Proc) Wait(timeout time.Duration) (int, error) {
	select {
	case <-p.done:
		return p.state.ExitCode(), nil
	case <-time.After(timeout):
		return 0, fmt.Errorf("%s still running after %v\nstderr:\n%s", p.Name, timeout, p.StderrTail(40))
	}
}

func (p *Proc) exitDesc() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == nil {
		return "running"
	}
	return p.state.String()
}
