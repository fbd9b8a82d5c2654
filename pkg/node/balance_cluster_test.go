package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/wecomsim"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// withBalancer looks every second (acting once the membership has held
// for two) with the default cooldown (10 minutes: longer than the test,
// so no bot may move twice).
func withBalancer(cfg *node.Config) {
	cfg.Balance = node.BalanceConfig{Interval: time.Second}
}

// leadsPerNode counts the bots each running node says it leads, connected.
func leadsPerNode(nodes map[string]*running) map[string]int {
	out := map[string]int{}
	for id, r := range nodes {
		for _, st := range r.n.Status() {
			if st.State == node.StateLeader {
				out[id]++
			}
		}
	}
	return out
}

// traffic posts a message to each bot in turn until stopped, and keeps
// the ids the simulator delivered to a connection.
type traffic struct {
	mu        sync.Mutex
	delivered []string
	posted    int
	stop      chan struct{}
	done      chan struct{}
}

func startTraffic(t *testing.T, c *cluster) *traffic {
	tr := &traffic{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		for i := 0; ; i++ {
			select {
			case <-tr.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			bot := c.bots[i%len(c.bots)].ID
			r, err := c.sim.PostMessage(wecomsim.MessageRequest{BotID: bot, UserID: "u", Text: fmt.Sprint(i)})
			tr.mu.Lock()
			tr.posted++
			if err == nil && r.Delivered {
				tr.delivered = append(tr.delivered, r.MsgID)
			}
			tr.mu.Unlock()
		}
	}()
	t.Cleanup(tr.end)
	return tr
}

func (tr *traffic) end() {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	<-tr.done
}

// Three nodes lead 9 bots; one is stopped (its bots go to the other two)
// and started again. The balancer brings every node back to its even
// share, 3 bots (a share of 3 at ±10 % is exactly 3: the band is the
// share ± 10 %, widened to the whole numbers around it), each move a
// graceful handover: no kick, and every message WeCom delivered to a
// connection during the moves handled exactly once. The moves made
// while the cluster formed are forgotten (their records deleted, as if
// the cluster had run past the cooldown); from then on no bot is moved
// by the balancer twice (the cooldown is longer than the test).
func TestBalanceRestoresTheSpreadAfterANodeReturns(t *testing.T) {
	var ids []string
	for i := range 9 {
		ids = append(ids, fmt.Sprintf("b%d", i))
	}
	c := newCluster(t, ids...)
	nodes := map[string]*running{}
	for _, id := range []string{"a", "b", "c"} {
		nodes[id] = c.startWith(id, "default", c.etcd.Endpoints(), c.bots, withBalancer)
	}
	even := func(what string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for k := leadsPerNode(nodes); k["a"] != 3 || k["b"] != 3 || k["c"] != 3; k = leadsPerNode(nodes) {
			if time.Now().After(deadline) {
				dumpBalance(t, c)
				t.Fatalf("%s: not within 2 minutes: %v", what, k)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	even("3 bots on each node at start")
	t.Logf("%s even at start", time.Now().UTC().Format("15:04:05.000"))
	if _, err := c.admin.Delete(context.Background(), etcdkeys.Layout{Root: etcdkeys.Root}.BalanceMove(""), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	formed := time.Now()

	nodes["c"].shutdown(t)
	delete(nodes, "c")
	testwait.Eventually(t, waitLong, "a and b lead all 9", func() bool {
		k := leadsPerNode(nodes)
		return k["a"]+k["b"] == 9
	})
	t.Logf("%s c stopped, a and b lead all: %v", time.Now().UTC().Format("15:04:05.000"), leadsPerNode(nodes))
	tr := startTraffic(t, c)
	back := time.Now()
	nodes["c"] = c.startWith("c", "default", c.etcd.Endpoints(), c.bots, withBalancer)
	even("3 bots on each node after c's return")
	t.Logf("spread restored %s after c started again", time.Since(back).Round(100*time.Millisecond))
	tr.end()

	// Once every node is back in every queue (a node that handed a bot
	// over joins its queue again after a pause), the plan moves nothing.
	testwait.Eventually(t, waitLong, "a plan that moves nothing", func() bool {
		plan, _, err := node.ReadBalancePlan(context.Background(), c.admin, "/botctl/", "", time.Now())
		return err == nil && plan.Balanced() && len(plan.Moves) == 0
	})
	handovers := 0
	for _, b := range c.bots {
		k := 0
		for _, ev := range transitionsOf(c, b.ID) {
			if ev.Event == "handover" && ev.At.After(formed) {
				k++
				t.Logf("%s %s: handover by %s %s", ev.At.Format("15:04:05.000"), b.ID, ev.Node, ev.Reason)
			}
		}
		if k > 1 {
			t.Fatalf("bot %s handed over %d times: %+v", b.ID, k, transitionsOf(c, b.ID))
		}
		handovers += k
		if s := c.stats(b.ID); s.Kicks != 0 {
			t.Fatalf("bot %s: %d kicks: a handover overlapped two connections", b.ID, s.Kicks)
		}
	}
	if handovers < 3 {
		t.Fatalf("%d handovers; c needed 3 bots", handovers)
	}
	tr.mu.Lock()
	delivered, posted := tr.delivered, tr.posted
	tr.mu.Unlock()
	testwait.Eventually(t, waitLong, "every delivered message handled", func() bool {
		for _, id := range delivered {
			if c.counter.count(id) == 0 {
				return false
			}
		}
		return true
	})
	for _, id := range delivered {
		if k := c.counter.count(id); k != 1 {
			t.Fatalf("message %s handled %d times", id, k)
		}
	}
	t.Logf("%d handovers; %d messages posted, %d delivered to a connection, each handled once", handovers, posted, len(delivered))
}

// dumpBalance logs the plan, the queues and every balancer handover, for
// a failed test.
func dumpBalance(t *testing.T, c *cluster) {
	plan, _, err := node.ReadBalancePlan(context.Background(), c.admin, "/botctl/", "", time.Now())
	t.Logf("plan now: %+v (%v)", plan, err)
	for _, b := range c.bots {
		t.Logf("%s queue %v", b.ID, c.queue(b.ID))
		for _, ev := range transitionsOf(c, b.ID) {
			t.Logf("  %s %s %s %s", ev.At.Format("15:04:05.000"), ev.Node, ev.Event, ev.Reason)
		}
	}
}

// Node a leads 4 bots, three of them moved by the balancer a moment ago
// (their records written as another node's would be). b starts: the plan
// gives b half, but only the one bot out of its cooldown moves; the three
// others stay with a over many looks, and the plan says why.
func TestBalanceDoesNotMoveABotAgainWithinItsCooldown(t *testing.T) {
	c := newCluster(t, "b0", "b1", "b2", "b3")
	fast := func(cfg *node.Config) { cfg.Balance = node.BalanceConfig{Interval: 300 * time.Millisecond} }
	a := c.startWith("a", "default", c.etcd.Endpoints(), c.bots, fast)
	testwait.Eventually(t, waitLong, "a leads all 4", func() bool { return leadsPerNode(map[string]*running{"a": a})["a"] == 4 })
	for _, bot := range []string{"b0", "b1", "b2"} {
		rec, _ := json.Marshal(node.BalanceMove{From: "z", To: "a", At: time.Now().UTC(), Reason: "test"})
		if _, err := c.admin.Put(context.Background(), etcdkeys.Layout{Root: etcdkeys.Root}.BalanceMove(bot), string(rec)); err != nil {
			t.Fatal(err)
		}
	}
	b := c.startWith("b", "default", c.etcd.Endpoints(), c.bots, fast)
	nodes := map[string]*running{"a": a, "b": b}
	testwait.Eventually(t, waitLong, "b3 handed over to b", func() bool {
		return c.leader("b3") == "b" && leadsPerNode(nodes)["b"] == 1
	})
	// 20 looks more, each past the steady time: the held bots stay.
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for _, bot := range []string{"b0", "b1", "b2"} {
			if l := c.leader(bot); l != "a" && l != "" {
				t.Fatalf("bot %s moved to %s within its cooldown: %+v", bot, l, transitionsOf(c, bot))
			}
		}
	}
	for _, bot := range []string{"b0", "b1", "b2"} {
		for _, ev := range transitionsOf(c, bot) {
			if ev.Event == "handover" {
				t.Fatalf("bot %s handed over within its cooldown: %+v", bot, ev)
			}
		}
	}
	plan, _, err := node.ReadBalancePlan(context.Background(), c.admin, etcdkeys.Root, "", time.Now())
	if err != nil || len(plan.Moves) != 0 || len(plan.Notes) == 0 || !strings.Contains(strings.Join(plan.Notes, " "), "cooldown") {
		t.Fatalf("plan with the bots held: %+v, %v", plan, err)
	}
	t.Logf("plan notes: %q", plan.Notes)
}
