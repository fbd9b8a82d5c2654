package node_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/node"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// queue is bot's election queue as etcd holds it: the node of each
// candidate key, the leader first.
func (c *cluster) queue(bot string) []string {
	resp, err := c.admin.Get(context.Background(), "/botctl/elect/"+bot+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil
	}
	var out []string
	for _, kv := range resp.Kvs {
		var v struct {
			Node string `json:"node"`
		}
		json.Unmarshal(kv.Value, &v)
		out = append(out, v.Node)
	}
	return out
}

// A rolling upgrade: a leads b1 on 0.5.0, b waits on 0.5.0, c joins last
// on 0.6.0 (rolled already). b steps back behind c, so a's graceful stop
// hands b1 to c, not to b, which would be rolled next: the bot moves once.
func TestHandoverGoesToTheNewerNode(t *testing.T) {
	c := newCluster(t, "b1")
	version := func(v string) func(*node.Config) { return func(cfg *node.Config) { cfg.Version = v } }
	a := c.startWith("a", "default", c.etcd.Endpoints(), c.bots, version("0.5.0"))
	if c.leaderOf("b1", a) != 0 {
		t.Fatal("a should lead")
	}
	b := c.startWith("b", "default", c.etcd.Endpoints(), c.bots, version("0.5.0"))
	testwait.Eventually(t, waitLong, "b queued behind a", func() bool {
		return slices.Equal(c.queue("b1"), []string{"a", "b"})
	})
	n := c.startWith("c", "default", c.etcd.Endpoints(), c.bots, version("0.6.0"))
	testwait.Eventually(t, waitLong, "b stepped back behind c", func() bool {
		return slices.Equal(c.queue("b1"), []string{"a", "c", "b"})
	})
	a.shutdown(t)
	if got := c.leaderOf("b1", b, n); got != 1 {
		t.Fatalf("b1 handed to %s, want c (the newer node)", []string{"b", "c"}[got])
	}
	if k := c.stats("b1").Kicks; k != 0 {
		t.Fatalf("%d kicks", k)
	}
}
