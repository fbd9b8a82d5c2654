package election

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// buildEtcdctl builds etcd's own etcdctl from the module go.mod pins (a
// tool dependency): the operator's tool, not a stand-in.
func buildEtcdctl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "etcdctl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "go.etcd.io/etcd/etcdctl/v3").CombinedOutput()
	if err != nil {
		t.Fatalf("build etcdctl: %v\n%s", err, out)
	}
	return bin
}

// listen runs `etcdctl elect --listen name` until the test ends and
// returns its output, line by line.
func listen(t *testing.T, etcdctl, name string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, etcdctl, "--endpoints", "http://"+etcdAddr, "elect", "--listen", name)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-scanned
		cmd.Wait()
		if t.Failed() {
			t.Logf("etcdctl elect --listen %s stderr:\n%s", name, stderr.String())
		}
	})
	return lines
}

// expectLeader reads etcdctl's output (a key line, then its value line)
// until it shows key as leader with node's proclaimed value.
func expectLeader(t *testing.T, lines <-chan string, key, node string) {
	t.Helper()
	deadline := time.After(eventTimeout)
	var prev string
	for {
		select {
		case line := <-lines:
			if prev == key {
				var v value
				if err := json.Unmarshal([]byte(line), &v); err != nil || v.Node != node {
					t.Fatalf("etcdctl shows leader key %s with value %q, want node %s", key, line, node)
				}
				if v.Since != nil && !v.Since.IsZero() {
					return
				}
			}
			prev = line
		case <-deadline:
			t.Fatalf("etcdctl did not show %s (node %s) as leader; last line %q", key, node, prev)
		}
	}
}

// Real etcdctl, observing each bot's election, names that bot's leader
// and follows a handover.
func TestEtcdctlSeesLeaderPerBot(t *testing.T) {
	leakCheck(t)
	etcdctl := buildEtcdctl(t)
	ctx := bg(t)
	admin := newClient(t, "")
	c1, c2 := newClient(t, ""), newClient(t, "")
	const ttl = 10 * time.Second
	e11 := newElector(t, c1, testConfig(t, "bot1", "n1", ttl))
	e22 := newElector(t, c2, testConfig(t, "bot2", "n2", ttl))
	t1 := await(t, campaign(t, ctx, e11), eventTimeout).term
	t2 := await(t, campaign(t, ctx, e22), eventTimeout).term
	standby1 := campaign(t, ctx, newElector(t, c2, testConfig(t, "bot1", "n2", ttl)))
	campaign(t, ctx, newElector(t, c1, testConfig(t, "bot2", "n1", ttl)))
	waitCandidates(t, admin, e11.Name(), 2)
	waitCandidates(t, admin, e22.Name(), 2)

	bot1 := listen(t, etcdctl, e11.Name())
	bot2 := listen(t, etcdctl, e22.Name())
	expectLeader(t, bot1, t1.Key, "n1")
	expectLeader(t, bot2, t2.Key, "n2")

	if err := t1.Resign(rpcCtx(t)); err != nil {
		t.Fatal(err)
	}
	t1b := await(t, standby1, eventTimeout).term
	expectLeader(t, bot1, t1b.Key, "n2")
	if err := t2.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("bot2's leader after bot1 changed hands: %v", err)
	}
}
