package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
)

// lines is a writer that signals each complete line.
type lines struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	seen chan string
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		s := l.buf.String()
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			break
		}
		l.buf.Next(i + 1)
		select {
		case l.seen <- s[:i]:
		default:
		}
	}
	return len(p), nil
}

// startEtcd is an embedded etcd for the status command.
func startEtcd(t *testing.T) string {
	t.Helper()
	e := testenv.StartEtcd(t)
	return e.Endpoints()[0]
}

// --watch without --json redraws the table every --interval (off a
// terminal: one round after the other, each under a timestamp line).
func TestStatusWatchTable(t *testing.T) {
	ep := startEtcd(t)
	out := &lines{seen: make(chan string, 256)}
	cmd := newRootCmd()
	cmd.SetOut(out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"status", "--etcd", ep, "--nats", "nats://127.0.0.1:1", "--timeout", "2s", "--watch", "--interval", "100ms"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	rounds, tables := 0, 0
	deadline := time.After(30 * time.Second)
	for rounds < 3 || tables < 3 {
		select {
		case line := <-out.seen:
			if strings.Contains(line, "(every 100ms; Ctrl-C to stop)") {
				rounds++
			}
			if strings.HasPrefix(line, "NODE ") {
				tables++
			}
		case err := <-done:
			t.Fatalf("watch ended early: %v", err)
		case <-deadline:
			t.Fatalf("after 30s: %d rounds, %d tables", rounds, tables)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("watch ended with %v after Ctrl-C, want nil", err)
	}
}

// --watch --json writes one Status object per line, every --interval,
// until its context ends (Ctrl-C), and then exits 0.
func TestStatusWatchJSON(t *testing.T) {
	ep := startEtcd(t)
	out := &lines{seen: make(chan string, 16)}
	cmd := newRootCmd()
	cmd.SetOut(out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"status", "--etcd", ep, "--nats", "nats://127.0.0.1:1", "--timeout", "2s",
		"--watch", "--json", "--interval", "100ms"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	for i := range 3 {
		select {
		case line := <-out.seen:
			var st struct {
				Nodes []json.RawMessage `json:"nodes"`
				Bots  []json.RawMessage `json:"bots"`
			}
			if err := json.Unmarshal([]byte(line), &st); err != nil || st.Nodes == nil || st.Bots == nil {
				t.Fatalf("line %d is not one status object: %q (%v)", i, line, err)
			}
		case err := <-done:
			t.Fatalf("watch ended early: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatalf("no line %d", i)
		}
	}
	cancel() // Ctrl-C
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("watch ended with %v after Ctrl-C, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not stop on Ctrl-C")
	}
}
