package node_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/wecomsim"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A WeCom URL that refuses connections: every term fails at dial. Without
// backoff each node ran hundreds of terms a second (thousands in this
// window, each a lease, a key, transitions and a registry write); with it
// the count is bounded by the backoff, both nodes get to try (the failing
// node resigns before it waits), and the state says why, never
// needs_human: a refused dial is not an auth failure.
func TestUnreachableWeComBacksOff(t *testing.T) {
	c := newCluster(t, "b1")
	addr, err := infra.FreeAddr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	get, err := c.admin.Get(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	startRev := get.Header.Revision
	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	terms := c.admin.Watch(wctx, election.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithRev(startRev+1))

	const window = 5 * time.Second
	edit := func(cfg *node.Config) {
		cfg.WeCom.URL = "ws://" + addr + "/"
		cfg.Backoff = 50 * time.Millisecond
		cfg.BackoffMax = time.Second
	}
	a := c.startWith("a", "default", c.etcd.Endpoints(), c.bots, edit)
	b := c.startWith("b", "default", c.etcd.Endpoints(), c.bots, edit)
	began := time.Now()
	testwait.Eventually(t, waitLong, "a node backing off after a refused dial", func() bool {
		for _, r := range []*running{a, b} {
			st := r.n.Status()["b1"]
			if st.State == node.StateBackoff && strings.Contains(st.Reason, "dial") {
				return true
			}
		}
		return false
	})
	// The measurement is over a fixed stretch of time on purpose: what is
	// bounded is a rate.
	deadline := time.NewTimer(window - time.Since(began))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-deadline.C:
			waiting = false
		case <-tick.C:
			for _, r := range []*running{a, b} {
				if st := state(r, "b1"); st == node.StateNeedsHuman {
					t.Fatalf("a refused dial marked the bot %s: %+v", st, r.n.Status()["b1"])
				}
			}
		}
	}
	a.shutdown(t)
	b.shutdown(t)
	elapsed := time.Since(began)

	get, err = c.admin.Get(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	revs := get.Header.Revision - startRev
	// Every term's creation is in the watch before this marker.
	end := election.DefaultPrefix + "~end-of-test"
	if _, err := c.admin.Put(context.Background(), end, ""); err != nil {
		t.Fatal(err)
	}
	holders := map[string]int{}
	n := 0
read:
	for wr := range terms {
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range wr.Events {
			if string(ev.Kv.Key) == end {
				break read
			}
			if ev.IsCreate() {
				var v struct{ Node string }
				json.Unmarshal(ev.Kv.Value, &v)
				holders[v.Node]++
				n++
			}
		}
	}
	t.Logf("%s: %d terms %v, %d etcd revisions", elapsed.Round(time.Millisecond), n, holders, revs)
	// Per node the waits are at least 25, 50, 100, 200, 400 ms, then 500 ms:
	// at most about 20 terms in this window even counting the startup, so
	// 2 nodes × 20 is a generous bound on a correct loop.
	if n > 40 {
		t.Fatalf("%d terms in %s: the loop does not back off", n, elapsed.Round(time.Millisecond))
	}
	if revs > 40*15 {
		t.Fatalf("%d etcd revisions in %s for %d terms: too many writes per term", revs, elapsed.Round(time.Millisecond), n)
	}
	if holders["a"] == 0 || holders["b"] == 0 {
		t.Fatalf("terms by node %v: a failing node must resign so the other may try", holders)
	}
}

func TestBackoffMaxBelowBackoffRejected(t *testing.T) {
	c := newCluster(t)
	_, err := node.New(c.admin, node.Config{NodeID: "n", Backoff: time.Second, BackoffMax: time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "BackoffMax") {
		t.Fatalf("err = %v, want it to name BackoffMax", err)
	}
}

// Only an authentication errcode at subscribe means "needs a human": a
// subscribe refused with another errcode (6000, command conflict) backs
// off and retries, and the bot connects once WeCom accepts again.
func TestNonAuthSubscribeRefusalBacksOffAndRecovers(t *testing.T) {
	c := newCluster(t, "b1")
	if err := c.sim.Fault(wecomsim.FaultRequest{BotID: "b1", Action: "refuse_subscribe", Seconds: 3, ErrCode: 6000}); err != nil {
		t.Fatal(err)
	}
	a := c.startWith("a", "default", c.etcd.Endpoints(), c.bots, func(cfg *node.Config) {
		cfg.Backoff, cfg.BackoffMax = 100*time.Millisecond, time.Second
	})
	testwait.Eventually(t, waitLong, "connected after the refusals end", func() bool {
		if st := a.n.Status()["b1"]; st.State == node.StateNeedsHuman {
			t.Fatalf("a non-auth subscribe refusal marked the bot needs_human: %+v", st)
		}
		return c.stats("b1").Connected
	})
	if s := c.stats("b1"); s.SubscribeRefusals == 0 {
		t.Fatalf("the simulator refused no subscribe: %+v", s)
	}
}
