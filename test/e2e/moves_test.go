package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/test/e2e/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A rolling upgrade between two releases that both step back (the code
// under test, built as 0.90.0 and as 0.91.0): each node is stopped with
// SIGTERM and started on the newer build, n1, n2, n3 in turn, the next
// only once the standbys still on the older build have stepped back behind
// the newer ones. The bot moves once, plus once if its first leader is
// the first node rolled (no newer node waits then): never to a node that
// is rolled next (docs/upgrading.md).
func TestRollingUpgradeMovesEachBotOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t, []string{"b1"})
	dir := t.TempDir()
	older, err := cluster.BuildVersion(dir, "v0.90.0", "botctl-older")
	if err != nil {
		t.Fatal(err)
	}
	newer, err := cluster.BuildVersion(dir, "v0.91.0", "botctl-newer")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if _, err := c.StartNodeWith(id, cluster.NodeOptions{Bin: older}); err != nil {
			t.Fatal(err)
		}
	}
	first := waitStable(t, c)["b1"]
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.EtcdURL, ","), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	var rolled []string
	for _, id := range []string{"n1", "n2", "n3"} {
		old := c.Node(id)
		if err := old.Proc.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, err := old.Proc.Wait(30 * time.Second); err != nil || code != 0 {
			t.Fatalf("node %s after SIGTERM: exit %d, %v", id, code, err)
		}
		if _, err := c.StartNodeWith(id, cluster.NodeOptions{Bin: newer}); err != nil {
			t.Fatal(err)
		}
		rolled = append(rolled, id)
		waitStable(t, c)
		testwait.Eventually(t, time.Minute, "every standby on the older build behind the newer ones", func() bool {
			return settled(cli, "b1", rolled)
		})
	}
	s, err := c.Stats("b1")
	if err != nil {
		t.Fatal(err)
	}
	want := int64(2) // the first leader's connection, then one move
	if first == "n1" {
		want = 3 // its leader rolled while no newer node waited
	}
	t.Logf("b1: first leader %s, %d connections", first, s.Connections)
	if s.Connections != want {
		t.Errorf("b1 connected %d times (first leader %s), want %d: it moved to a node that was rolled next", s.Connections, first, want)
	}
	requireNoKicks(t, c, "b1")
}

// settled reports whether no standby of bot on the older build (not in
// newer) waits ahead of one on the newer build in the bot's election
// queue ("/botctl/elect/<bot>/", the leader first).
func settled(cli *clientv3.Client, bot string, newer []string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/botctl/elect/"+bot+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) < 3 {
		return false // every node queued: three candidates
	}
	olderSeen := false
	for _, kv := range resp.Kvs[1:] {
		var v struct {
			Node string `json:"node"`
		}
		json.Unmarshal(kv.Value, &v)
		isNewer := slices.Contains(newer, v.Node)
		if isNewer && olderSeen {
			return false
		}
		olderSeen = olderSeen || !isNewer
	}
	return true
}
