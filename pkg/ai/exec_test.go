package ai

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func newExecForTest(t *testing.T, cfg ExecConfig) Backend {
	t.Helper()
	b, err := newUnchained(Config{Kind: KindExec, Exec: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// shell is an exec backend running script with sh -c; "$1" is arg.
func shell(t *testing.T, script string, arg string) Backend {
	t.Helper()
	return newExecForTest(t, ExecConfig{Command: []string{"sh", "-c", script, "sh", arg}})
}

func TestExecQuestionOnStdin(t *testing.T) {
	leakCheck(t)
	b := shell(t, `printf 'A: '; cat; printf ' [%s]' "$BOTCTL_TASK_ID"`, "")
	if b.Name() != "exec:sh" {
		t.Errorf("Name() = %q, want exec:sh (no arguments: they may hold secrets)", b.Name())
	}
	req := Request{TaskID: "task-7", Messages: []Message{
		{Role: RoleUser, Content: "old"}, {Role: RoleAssistant, Content: "older answer"}, {Role: RoleUser, Content: "你好？"},
	}}
	rec := newRecorder()
	if err := b.Stream(context.Background(), req, rec.emit); err != nil {
		t.Fatal(err)
	}
	checkDeltas(t, rec.all())
	if got, want := rec.text(), "A: 你好？ [task-7]"; got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
}

func TestExecConversationAndJSONInput(t *testing.T) {
	leakCheck(t)
	req := Request{TaskID: "t2", Messages: []Message{
		{Role: RoleSystem, Content: "be brief"},
		{Role: RoleUser, Content: "q1"},
		{Role: RoleAssistant, Content: "a1"},
		{Role: RoleUser, Content: "q2\nsecond line"},
	}}
	conv := newExecForTest(t, ExecConfig{Command: []string{"cat"}, Input: ExecInputConversation})
	rec := newRecorder()
	if err := conv.Stream(context.Background(), req, rec.emit); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.text(), "system: be brief\n\nuser: q1\n\nassistant: a1\n\nuser: q2\nsecond line\n"; got != want {
		t.Errorf("conversation input %q, want %q", got, want)
	}

	js := newExecForTest(t, ExecConfig{Command: []string{"cat"}, Input: ExecInputJSON})
	rec = newRecorder()
	if err := js.Stream(context.Background(), req, rec.emit); err != nil {
		t.Fatal(err)
	}
	var got Request
	if err := json.Unmarshal([]byte(rec.text()), &got); err != nil {
		t.Fatalf("json input %q: %v", rec.text(), err)
	}
	if got.TaskID != req.TaskID || len(got.Messages) != 4 || got.Messages[3] != req.Messages[3] {
		t.Errorf("json input decodes to %+v, want %+v", got, req)
	}
}

// TestExecStreamsAsProduced: the first line arrives while the process is
// still running (it waits for a file the test creates on seeing it).
func TestExecStreamsAsProduced(t *testing.T) {
	leakCheck(t)
	flag := filepath.Join(t.TempDir(), "go-on")
	b := shell(t, `printf 'first\n'; while [ ! -e "$1" ]; do sleep 0.02; done; printf 'second\n'`, flag)
	rec := newRecorder()
	wait := streamAsync(t, context.Background(), b, question("q"), rec)
	rec.waitFor(t, "first\n")
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	if got := rec.all(); len(got) < 2 || got[0] != "first\n" || rec.text() != "first\nsecond\n" {
		t.Errorf("deltas %q, want \"first\\n\" then \"second\\n\"", got)
	}
}

// TestExecUTF8Boundaries: a rune split across writes (and reads) is never
// split across deltas; bytes that are not UTF-8 become U+FFFD.
func TestExecUTF8Boundaries(t *testing.T) {
	leakCheck(t)
	flag := filepath.Join(t.TempDir(), "go-on")
	// 你 is e4 bd a0: the first byte comes with "a", the rest after the flag.
	b := shell(t, `printf 'a\344'; while [ ! -e "$1" ]; do sleep 0.02; done; printf '\275\240b\377c\345'`, flag)
	rec := newRecorder()
	wait := streamAsync(t, context.Background(), b, question("q"), rec)
	rec.waitFor(t, "a")
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	deltas := rec.all()
	checkDeltas(t, deltas)
	if deltas[0] != "a" {
		t.Errorf("first delta %q, want \"a\" (the partial rune held back)", deltas[0])
	}
	if got, want := rec.text(), "a你b\uFFFDc\uFFFD"; got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
}

func TestCompleteUTF8(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"abc", 3},
		{"a\xe4", 1},
		{"a\xe4\xbd", 1},
		{"a你", 4},
		{"\xf0\x9f\x98", 0},
		{"\xf0\x9f\x98\x80", 4},
		{"a\xff", 2},     // invalid, not partial: emitted (as U+FFFD)
		{"a\xbd\xa0", 3}, // continuation bytes with no start: invalid
	} {
		if got := completeUTF8([]byte(tc.in)); got != tc.want {
			t.Errorf("completeUTF8(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestExecFailureCarriesStderrTail(t *testing.T) {
	leakCheck(t)
	b := shell(t, `printf 'partial'; i=0; while [ $i -lt 400 ]; do echo "noise line $i" >&2; i=$((i+1)); done; echo 'model crashed: out of memory' >&2; exit 3`, "")
	rec := newRecorder()
	err := b.Stream(context.Background(), question("q"), rec.emit)
	if !errors.Is(err, ErrBackend) || !Retryable(err) {
		t.Fatalf("Stream: %v, want ErrBackend", err)
	}
	msg := err.Error()
	for _, want := range []string{"exit status 3", "model crashed: out of memory", "task t1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "noise line 0\n") || len(msg) > execStderrTail+200 {
		t.Errorf("error is %d bytes; want only the tail of stderr", len(msg))
	}
	if rec.text() != "partial" {
		t.Errorf("emitted %q before failing, want \"partial\"", rec.text())
	}
}

func TestExecStartFailure(t *testing.T) {
	leakCheck(t)
	dir := t.TempDir()
	prog := filepath.Join(dir, "answer")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b := newExecForTest(t, ExecConfig{Command: []string{prog}})
	if err := os.Remove(prog); err != nil {
		t.Fatal(err)
	}
	err := b.Stream(context.Background(), question("q"), newRecorder().emit)
	if !errors.Is(err, ErrBackend) {
		t.Fatalf("Stream: %v, want ErrBackend", err)
	}
}

// processGone reports whether pid has exited (a zombie counts: it runs no
// more, and a container's init may be slow to reap it).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return os.IsNotExist(err)
	}
	// pid (comm) state …; comm may hold spaces or parens.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d still running %s later", pid, waitLong)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	return pid
}

// TestExecCancelKillsProcessGroup: cancel returns promptly and kills the
// command's children too.
func TestExecCancelKillsProcessGroup(t *testing.T) {
	leakCheck(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	b := shell(t, `sleep 1000 & echo $! > "$1.tmp"; mv "$1.tmp" "$1"; echo started; wait`, pidFile)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := newRecorder()
	wait := streamAsync(t, ctx, b, question("q"), rec)
	rec.waitFor(t, "started")
	child := readPid(t, pidFile)
	cancel()
	took, err := wait()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Stream: %v, want context.Canceled", err)
	}
	if took > prompt {
		t.Errorf("Stream returned %s after cancel", took)
	}
	waitGone(t, child)
}

func TestExecTimeout(t *testing.T) {
	leakCheck(t)
	b := newExecForTest(t, ExecConfig{Command: []string{"sh", "-c", "echo thinking; sleep 1000"}, Timeout: 300 * time.Millisecond})
	rec := newRecorder()
	start := time.Now()
	err := b.Stream(context.Background(), question("q"), rec.emit)
	if !errors.Is(err, ErrTimeout) || !Retryable(err) {
		t.Fatalf("Stream: %v, want ErrTimeout", err)
	}
	if !strings.Contains(err.Error(), "ai.exec.timeout") {
		t.Errorf("error %q does not name the key to raise", err)
	}
	if took := time.Since(start); took > 300*time.Millisecond+prompt+2*time.Second {
		t.Errorf("timed out after %s", took)
	}
	if rec.text() != "thinking\n" {
		t.Errorf("emitted %q", rec.text())
	}
}

func TestExecEmitErrorStops(t *testing.T) {
	leakCheck(t)
	b := newExecForTest(t, ExecConfig{Command: []string{"yes", "hello"}})
	errFull := errors.New("storage full")
	rec := newRecorder()
	rec.fail = errFull
	done := make(chan error, 1)
	go func() { done <- b.Stream(context.Background(), question("q"), rec.emit) }()
	select {
	case err := <-done:
		if err != errFull {
			t.Fatalf("Stream: %v, want emit's error unchanged", err)
		}
	case <-time.After(waitLong):
		t.Fatal("Stream went on after emit failed")
	}
	if n := len(rec.all()); n != 1 {
		t.Errorf("%d emits, want 1", n)
	}
}

// TestExecChildHoldingStdout: a child that leaves the process group and
// keeps stdout open does not hold the answer once the command has exited.
func TestExecChildHoldingStdout(t *testing.T) {
	leakCheck(t)
	if _, err := os.Stat("/usr/bin/setsid"); err != nil {
		t.Skip("no setsid")
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	b := shell(t, `setsid sh -c 'echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 1000' sh "$1" & while [ ! -e "$1" ]; do sleep 0.02; done; echo done`, pidFile)
	rec := newRecorder()
	start := time.Now()
	err := b.Stream(context.Background(), question("q"), rec.emit)
	t.Cleanup(func() {
		pid := readPid(t, pidFile)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		waitGone(t, pid)
	})
	if err != nil {
		t.Fatal(err)
	}
	if rec.text() != "done\n" {
		t.Errorf("answer %q", rec.text())
	}
	if took := time.Since(start); took > execExitGrace+5*time.Second {
		t.Errorf("answer took %s", took)
	}
}

// TestExecLargeInputUnread: a command that never reads a stdin larger than
// a pipe's buffer still completes, and still cancels promptly.
func TestExecLargeInputUnread(t *testing.T) {
	leakCheck(t)
	big := question(strings.Repeat("很长的问题 ", 40000)) // ~640 KB
	rec := newRecorder()
	if err := shell(t, `echo hi`, "").Stream(context.Background(), big, rec.emit); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if rec.text() != "hi\n" {
		t.Errorf("answer %q", rec.text())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec = newRecorder()
	wait := streamAsync(t, ctx, shell(t, `echo started; sleep 1000`, ""), big, rec)
	rec.waitFor(t, "started")
	cancel()
	took, err := wait()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Stream: %v, want context.Canceled", err)
	}
	if took > prompt {
		t.Errorf("Stream returned %s after cancel", took)
	}
}

// The exec process sees a clean environment: the node's bot secrets and API
// keys stay out; what ai.exec.env names gets in.
func TestExecCleanEnvironment(t *testing.T) {
	leakCheck(t)
	t.Setenv("BOTCTL_BOT_MYBOT_SECRET", "bot-secret-value")
	t.Setenv("OPENAI_API_KEY", "sk-parent-key")
	t.Setenv("AI_TEST_PASSED", "passed-value")
	t.Setenv("LANG", "C.UTF-8")
	b := newExecForTest(t, ExecConfig{Command: []string{"env"}, Env: []string{"AI_TEST_PASSED", "MODEL=small", "AI_TEST_UNSET_NAME"}})
	rec := newRecorder()
	if err := b.Stream(context.Background(), Request{TaskID: "t-env", Messages: []Message{{Role: RoleUser, Content: "q"}}}, rec.emit); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(rec.text()), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	for _, secret := range []string{"BOTCTL_BOT_MYBOT_SECRET", "OPENAI_API_KEY"} {
		if _, ok := got[secret]; ok {
			t.Errorf("%s reached the exec process", secret)
		}
	}
	if strings.Contains(rec.text(), "bot-secret-value") || strings.Contains(rec.text(), "sk-parent-key") {
		t.Errorf("a secret's value reached the exec process:\n%s", rec.text())
	}
	want := map[string]string{"AI_TEST_PASSED": "passed-value", "MODEL": "small", "BOTCTL_TASK_ID": "t-env", "LANG": "C.UTF-8", "PATH": os.Getenv("PATH")}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["AI_TEST_UNSET_NAME"]; ok {
		t.Error("a name unset in the node was set for the process")
	}
	allowed := map[string]bool{"PATH": true, "HOME": true, "LANG": true, "LC_ALL": true, "LC_CTYPE": true, "TZ": true, "TMPDIR": true,
		"AI_TEST_PASSED": true, "MODEL": true, "BOTCTL_TASK_ID": true}
	for k := range got {
		if !allowed[k] {
			t.Errorf("%s reached the exec process: not configured for it", k)
		}
	}
}

// The node's own variables (BOTCTL_*: bot secrets, the API token's and the
// etcd and NATS password files' paths) never reach the exec process, even
// when ai.exec.env names them (config check refuses that too).
func TestExecNeverGetsTheNodesCredentials(t *testing.T) {
	leakCheck(t)
	node := map[string]string{
		"BOTCTL_BOT_MYBOT_SECRET":   "bot-secret-value",
		"BOTCTL_API_TOKEN_FILE":     "/run/credentials/botctl.service/api.token",
		"BOTCTL_ETCD_PASSWORD_FILE": "/run/credentials/botctl.service/etcd.pw",
		"BOTCTL_NATS_PASSWORD_FILE": "/run/credentials/botctl.service/nats.pw",
	}
	var names []string
	for k, v := range node {
		t.Setenv(k, v)
		names = append(names, k)
	}
	cfg := ExecConfig{Command: []string{"env"}, Env: names}
	if _, err := New(Config{Kind: KindExec, Exec: cfg}); err == nil || !strings.Contains(err.Error(), "config key ai.exec.env[0]") {
		t.Errorf("an exec backend passing the node's BOTCTL_* variables: %v, want a refusal naming ai.exec.env[0]", err)
	}
	b, err := newExec(cfg) // built anyway, past the check: still withheld
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	if err := b.Stream(context.Background(), Request{TaskID: "t-env", Messages: []Message{{Role: RoleUser, Content: "q"}}}, rec.emit); err != nil {
		t.Fatal(err)
	}
	for k, v := range node {
		if strings.Contains(rec.text(), k+"=") || strings.Contains(rec.text(), v) {
			t.Errorf("%s reached the exec process:\n%s", k, rec.text())
		}
	}
}
