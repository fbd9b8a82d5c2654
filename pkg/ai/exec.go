package ai

import (
	"bytes"
	"context"
	"encoding/json"
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
	"unicode/utf8"

	"github.com/botctl/botctl/pkg/config"
)

// Exec input modes.
const (
	ExecInputQuestion     = config.ExecInputQuestion
	ExecInputConversation = config.ExecInputConversation
	ExecInputJSON         = config.ExecInputJSON
)

const (
	// execStderrTail is how much of the end of stderr an error carries.
	execStderrTail = 2048
	// execExitGrace: after the process exits, how long its stdout may stay
	// open (held by a child that left the process group) before the answer
	// is taken as complete.
	execExitGrace = 500 * time.Millisecond
	// execWaitDelay bounds how long stdin/stderr copying may outlive the
	// process (see exec.Cmd.WaitDelay).
	execWaitDelay = 500 * time.Millisecond
	execReadSize  = 16 << 10
)

// execBaseEnv is what every exec process gets from the node's environment:
// what programs need to run, none of it secret.
var execBaseEnv = []string{"PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"}

type execBackend struct {
	cfg  ExecConfig
	path string // Command[0] resolved
	name string
}

// environ is the process's whole environment (see ExecConfig).
func (b *execBackend) environ(taskID string) []string {
	var env []string
	for _, name := range execBaseEnv {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	for _, kv := range b.cfg.Env {
		if strings.Contains(kv, "=") {
			env = append(env, kv)
		} else if v, ok := os.LookupEnv(kv); ok && !config.ExecEnvWithheld(kv) {
			env = append(env, kv+"="+v)
		}
	}
	return append(env, "BOTCTL_TASK_ID="+taskID)
}

// newExec builds the exec backend of a validated cfg
// (config.AIExec.validate): the command is looked up in PATH and the
// working directory checked now, its defaults filled in.
func newExec(cfg ExecConfig) (*execBackend, error) {
	path, err := exec.LookPath(cfg.Command[0])
	if err != nil {
		return nil, fmt.Errorf("config key ai.exec.command: %w", err)
	}
	if cfg.Input == "" {
		cfg.Input = ExecInputQuestion
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = config.ExecDefaultTimeout
	}
	if cfg.Dir != "" {
		if fi, err := os.Stat(cfg.Dir); err != nil {
			return nil, fmt.Errorf("config key ai.exec.dir: %w", err)
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("config key ai.exec.dir: %s is not a directory", cfg.Dir)
		}
	}
	// The name shows the program only: arguments may carry secrets.
	return &execBackend{cfg: cfg, path: path, name: KindExec + ":" + filepath.Base(cfg.Command[0])}, nil
}

func (b *execBackend) Name() string { return b.name }

func (b *execBackend) input(req Request) ([]byte, error) {
	switch b.cfg.Input {
	case ExecInputConversation:
		var sb strings.Builder
		for i, m := range req.Messages {
			if i > 0 {
				sb.WriteString("\n\n")
			}
			sb.WriteString(m.Role)
			sb.WriteString(": ")
			sb.WriteString(m.Content)
		}
		sb.WriteString("\n")
		return []byte(sb.String()), nil
	case ExecInputJSON:
		return json.Marshal(req)
	}
	return []byte(req.Question()), nil
}

// Stream runs the command once. Its stdout is read in chunks as they come;
// a chunk ending inside a multi-byte rune keeps the rune's first bytes for
// the next delta, and bytes that are not UTF-8 become U+FFFD. When the
// process exits, the rest of its process group is killed.
func (b *execBackend) Stream(ctx context.Context, req Request, emit func(string) error) error {
	if err := req.validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	stdin, err := b.input(req)
	if err != nil {
		return fmt.Errorf("%w: %s: task %s: encode input: %v", ErrBadRequest, b.name, req.TaskID, err)
	}
	runCtx, cancelTimeout := context.WithTimeoutCause(ctx, b.cfg.Timeout, errAnswerTimeout)
	defer cancelTimeout()
	runCtx, stop := context.WithCancelCause(runCtx)
	defer stop(nil)

	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("%w: %s: task %s: %v", ErrBackend, b.name, req.TaskID, err)
	}
	defer stdoutR.Close()

	stderr := &tailBuffer{max: execStderrTail}
	cmd := exec.CommandContext(runCtx, b.path, b.cfg.Command[1:]...)
	cmd.Args[0] = b.cfg.Command[0]
	cmd.Dir = b.cfg.Dir
	cmd.Env = b.environ(req.TaskID)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout = stdoutW
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = execWaitDelay
	err = cmd.Start()
	stdoutW.Close() // the child has its copy; EOF comes when every writer is gone
	if err != nil {
		return fmt.Errorf("%w: %s: task %s: start: %v", ErrBackend, b.name, req.TaskID, err)
	}

	// The waiter owns cmd.Wait; Stream waits for it on every path below.
	waited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		// Stragglers of the group (background jobs of a script) die with it.
		_ = killGroup(cmd.Process.Pid)
		grace := execExitGrace
		if runCtx.Err() != nil {
			grace = 0
		}
		_ = stdoutR.SetReadDeadline(time.Now().Add(grace))
		waited <- err
	}()

	readErr, emitErr := b.pump(stdoutR, emit)
	if emitErr != nil {
		stop(emitErr)
	}
	waitErr := <-waited
	if errors.Is(waitErr, exec.ErrWaitDelay) {
		// The process exited 0; a child that left its group still holds
		// stdin or stderr. The answer is complete.
		waitErr = nil
	}

	switch {
	case emitErr != nil:
		return emitErr
	case ctx.Err() != nil:
		return ctx.Err()
	case context.Cause(runCtx) == errAnswerTimeout:
		return fmt.Errorf("%w: %s: task %s: no complete answer within %s (ai.exec.timeout); the process group was killed", ErrTimeout, b.name, req.TaskID, b.cfg.Timeout)
	case waitErr != nil:
		msg := waitErr.Error()
		if tail := stderr.String(); tail != "" {
			msg += "; stderr: " + tail
		}
		return fmt.Errorf("%w: %s: task %s: %s", ErrBackend, b.name, req.TaskID, msg)
	case readErr != nil:
		return fmt.Errorf("%w: %s: task %s: read stdout: %v", ErrBackend, b.name, req.TaskID, readErr)
	}
	return nil
}

// pump reads r to its end (EOF, or the deadline the waiter sets) and emits
// what it reads as valid UTF-8. readErr is a read failure other than the
// end; emitErr is emit's error, after which pump stops reading.
func (b *execBackend) pump(r *os.File, emit func(string) error) (readErr, emitErr error) {
	buf := make([]byte, execReadSize)
	var pending []byte // bytes read, not yet emitted (at most a partial rune)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			pending = append(pending, buf[:n]...)
			cut := completeUTF8(pending)
			if cut > 0 {
				delta := strings.ToValidUTF8(string(pending[:cut]), "\uFFFD")
				pending = append(pending[:0], pending[cut:]...)
				if err := emit(delta); err != nil {
					return nil, err
				}
			}
		}
		if err == nil {
			continue
		}
		if len(pending) > 0 { // a rune cut short by the end of output
			if err := emit(strings.ToValidUTF8(string(pending), "\uFFFD")); err != nil {
				return nil, err
			}
		}
		if err == io.EOF || errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, nil
		}
		return err, nil
	}
}

// completeUTF8 is the length of p without a multi-byte rune cut short at
// its end: p[:n] can be emitted now, p[n:] waits for the rest of its rune.
func completeUTF8(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			if utf8.FullRune(p[i:]) {
				return len(p)
			}
			return i
		}
	}
	return len(p)
}

// killGroup kills the process group led by pid. A group already gone is not
// an error.
func killGroup(pid int) error {
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String is the tail as trimmed, valid UTF-8, without a rune cut at its start.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	cut := len(b) == t.max // the tail may start mid-line, mid-rune
	for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
		b = b[1:]
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if cut && s != "" {
		s = "…" + s
	}
	return s
}
