package main

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
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
