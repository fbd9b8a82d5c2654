// Package e2e runs real botctl processes — one `botctl infra`, one
// `botctl sim` and three `botctl serve` nodes per test — and checks the
// election rules of docs/architecture.md from the outside: one
// leader per bot, handover without ping-pong (the simulator's kick count
// stays 0), graceful stop within one campaign round, crash takeover within
// the TTL, partitions, and no message handled twice.
//
// `go test -short` skips it. `make chaos` runs the partition tests many times.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/test/e2e/cluster"
)

// bin is the botctl binary built once by TestMain.
var bin string

// Timings of every test cluster: short, so the suite stays fast.
const (
	ttl    = 3 * time.Second
	margin = 1 * time.Second
)

// Every test starts a cluster of processes of its own (ports from the
// kernel or infra.FreeAddrs, data in t.TempDir) and reads only its own
// processes, so all but the one that sets an environment variable call
// t.Parallel. They spend most of their time waiting on time windows
// (TTLs, answers, alert windows), not on the CPU: four run at once.
func TestMain(m *testing.M) {
	flag.Parse()
	if err := testenv.Parallel(4); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(2)
	}
	if testing.Short() {
		os.Exit(m.Run()) // every test skips itself
	}
	dir, err := os.MkdirTemp("", "botctl-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	bin, err = cluster.Build(dir)
	if err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, "e2e: build botctl:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// newCluster starts infra and the simulator with bots, and registers their
// (and every later node's) kill on cleanup; on failure, the cleanup logs
// every process's stderr tail.
func newCluster(t *testing.T, bots []string, simArgs ...string) *cluster.Cluster {
	t.Helper()
	return newClusterWith(t, bots, []string{"--ai", "demo", "--demo-answer-time", "1s"}, simArgs...)
}

// newClusterWith starts a cluster whose nodes get nodeArgs.
func newClusterWith(t *testing.T, bots, nodeArgs []string, simArgs ...string) *cluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e: skipped in -short mode")
	}
	c, err := cluster.Start(cluster.Options{Bin: bin, Dir: t.TempDir(), Bots: bots, TTL: ttl, Margin: margin, SimArgs: simArgs,
		NodeArgs: nodeArgs})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("processes:\n%s", c.Dump(40))
		}
		c.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startNode(t *testing.T, c *cluster.Cluster, id, etcdURL string) *cluster.Node {
	t.Helper()
	n, err := c.StartNode(id, etcdURL)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// startNodes starts n1..nN on the cluster's etcd.
func startNodes(t *testing.T, c *cluster.Cluster, count int) {
	t.Helper()
	for i := 1; i <= count; i++ {
		startNode(t, c, fmt.Sprintf("n%d", i), "")
	}
}

func waitStable(t *testing.T, c *cluster.Cluster) map[string]string {
	t.Helper()
	leaders, err := c.WaitStable(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return leaders
}

// requireNoKicks fails if the simulator replaced any connection of bots.
func requireNoKicks(t *testing.T, c *cluster.Cluster, bots ...string) {
	t.Helper()
	for _, b := range bots {
		s, err := c.Stats(b)
		if err != nil {
			t.Fatal(err)
		}
		if s.Kicks != 0 {
			t.Errorf("bot %s: simulator counted %d kicks (ping-pong: a connection was replaced while another node's was open); stats %+v", b, s.Kicks, s)
		}
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
