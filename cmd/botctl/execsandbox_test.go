package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var failNext atomic.Bool // the next sandboxed program exits 3

// Through the sandbox's socket the exec program gets its stdin, its stdout
// and stderr come back, and the relay exits with the program's status (a
// failing program is not taken for a complete answer). As systemd's
// Accept=yes socket does, each connection gets its own serve.
func TestExecSandboxRelaysOutputAndStatus(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "exec.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	script := `read q; echo "answer to $q"; echo "a warning" >&2; exit ${CODE:-0}`
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				code := "0"
				if failNext.Swap(false) {
					code = "3"
				}
				serveExec(context.Background(), []string{"sh", "-c", "CODE=" + code + "; " + script}, c, c)
			}()
		}
	}()
	relay := func() (int, string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		code, err := relayExec(ctx, sock, strings.NewReader("the question\n"), &out, &errb)
		if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}
	if code, out, errs := relay(); code != 0 || out != "answer to the question\n" || errs != "a warning\n" {
		t.Fatalf("relay: exit %d, stdout %q, stderr %q; want 0, the answer and the warning", code, out, errs)
	}
	failNext.Store(true)
	if code, out, _ := relay(); code != 3 || out != "answer to the question\n" {
		t.Fatalf("relay of a failing program: exit %d, stdout %q; want exit 3", code, out)
	}
	// No sandbox listening: a clear error, not an empty answer.
	if _, err := relayExec(context.Background(), filepath.Join(t.TempDir(), "none.sock"), strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}); err == nil ||
		!strings.Contains(err.Error(), "botctl-exec.socket") {
		t.Fatalf("relay to no socket: %v, want an error naming botctl-exec.socket", err)
	}
}

// The sandboxed program sees a task's files as files of its own: the
// relay (the node's side) sends the bytes of each attachment's file, the
// sandbox's side writes them under its own TMPDIR and gives the program
// the task with those paths, never the node's (a file the relay could not
// read has no path at all), and removes them once the program exited.
func TestExecSandboxGivesTheProgramItsFiles(t *testing.T) {
	node, sandbox := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", sandbox) // the sandbox's side's (the unit's private /tmp)
	png, csv := []byte("\x89PNG fake image bytes"), []byte("city,people\nA,1\n")
	if err := os.WriteFile(filepath.Join(node, "a.png"), png, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(node, "b.csv"), csv, 0o600); err != nil {
		t.Fatal(err)
	}
	task, _ := json.Marshal(map[string]any{"task_id": "t1", "messages": []map[string]string{{"role": "user", "content": "what is in them?"}},
		"attachments": []map[string]any{
			{"kind": "image", "name": "a.png", "size": len(png), "path": filepath.Join(node, "a.png")},
			{"kind": "file", "name": "gone.txt", "size": 3, "path": filepath.Join(node, "gone.txt")},
			{"kind": "file", "name": "b.csv", "size": len(csv), "path": filepath.Join(node, "b.csv")},
		}})

	sock := filepath.Join(t.TempDir(), "exec.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The program prints its task, then each file its task names.
	script := `in=$(cat); printf '%s\n' "$in"
for p in $(printf '%s' "$in" | grep -o '"path":"[^"]*"' | sed 's/^"path":"//; s/"$//'); do printf '== %s\n' "$p"; cat "$p"; printf '\n'; done`
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		served <- serveExec(context.Background(), []string{"sh", "-c", script}, c, c)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code, err := relayExec(ctx, sock, bytes.NewReader(task), &out, &errb)
	if err != nil || code != 0 {
		t.Fatalf("relay: exit %d, %v; stderr %q", code, err, errb.String())
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}

	first, rest, _ := strings.Cut(out.String(), "\n")
	var got struct {
		TaskID      string `json:"task_id"`
		Attachments []struct {
			Name string `json:"name"`
			Path string `json:"path"`
		} `json:"attachments"`
	}
	if err := json.Unmarshal([]byte(first), &got); err != nil || got.TaskID != "t1" || len(got.Attachments) != 3 {
		t.Fatalf("the program's task %q: %v", first, err)
	}
	if strings.Contains(out.String(), node) {
		t.Fatalf("the program was given a path of the node's:\n%s", out.String())
	}
	for i, want := range map[int][]byte{0: png, 2: csv} {
		p := got.Attachments[i].Path
		if !strings.HasPrefix(p, sandbox+string(filepath.Separator)) || !strings.HasSuffix(p, got.Attachments[i].Name) {
			t.Fatalf("attachment %d's path %q: want a file of the sandbox's, under %s", i, p, sandbox)
		}
		if !strings.Contains(rest, "== "+p+"\n"+string(want)+"\n") {
			t.Fatalf("the program did not read attachment %d's bytes at %s:\n%s", i, p, rest)
		}
	}
	if p := got.Attachments[1].Path; p != "" {
		t.Fatalf("a file the relay could not read has the path %q, want none", p)
	}
	if left, _ := filepath.Glob(filepath.Join(sandbox, "botctl-exec-files-*")); len(left) != 0 {
		t.Fatalf("the sandbox's copies left behind: %v", left)
	}
}

// A relay of before sends the task alone: it reaches the program as it is.
// A relay's files out of turn fail the task, leaving nothing behind.
func TestExecSandboxTaskFromAnOlderRelayOrBroken(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	task, dir, err := receiveTask(strings.NewReader("the question\n"))
	if err != nil || dir != "" {
		t.Fatalf("a task alone: dir %q, %v", dir, err)
	}
	if b, _ := io.ReadAll(task); string(b) != "the question\n" {
		t.Fatalf("a task alone reads %q", b)
	}
	var broken bytes.Buffer
	broken.WriteString(execFilesMagic)
	var mu sync.Mutex
	frameWriter{mu: &mu, out: &broken, typ: 'd'}.frame([]byte("bytes of no file"))
	if _, dir, err := receiveTask(&broken); err == nil || dir != "" {
		t.Fatalf("file bytes before a file: dir %q, %v; want an error", dir, err)
	}
	broken.Reset()
	broken.WriteString(execFilesMagic)
	frameWriter{mu: &mu, out: &broken, typ: 'f'}.frame(append([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}, "a.txt"...))
	frameWriter{mu: &mu, out: &broken, typ: 'd'}.frame([]byte("short"))
	_, dir, err = receiveTask(&broken)
	if dir != "" {
		defer os.RemoveAll(dir)
	}
	if err == nil || !strings.Contains(err.Error(), "short") {
		t.Fatalf("a file cut short: %v; want an error", err)
	}
}

// The shipped sandbox units parse, every directive known to this
// machine's systemd (systemd-analyze verify; skipped where it is not
// installed). Their isolation is tested by booting them in a container:
// test/deploy, TestExecSandboxUnitsIsolateTheProgram.
func TestExecSandboxUnitsParse(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	dir := t.TempDir()
	for _, name := range []string{"botctl-exec.socket", "botctl-exec@.service"} {
		raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", name))
		if err != nil {
			t.Fatal(err)
		}
		// The program is not installed here: ExecStart names one that is.
		unit := strings.ReplaceAll(string(raw), "/usr/local/bin/botctl exec-sandbox serve -- /usr/local/bin/answer", "/bin/sh -c true")
		if err := os.WriteFile(filepath.Join(dir, name), []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(analyze, "verify", filepath.Join(dir, "botctl-exec.socket"), filepath.Join(dir, "botctl-exec@.service"))
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "Unknown") || strings.Contains(line, "Invalid") || strings.Contains(line, "Failed to parse") || strings.Contains(line, "not executable") {
			t.Fatalf("systemd-analyze verify: %s (exit %v)\n%s", line, err, out)
		}
	}
}
