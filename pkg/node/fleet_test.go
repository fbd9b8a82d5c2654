package node_test

import (
	"errors"
	"testing"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// A running node campaigns for a bot Serve adds, stops for one Drop
// takes away (its connection closed, the bot gone from its status), and
// serves it again when it is added again.
func TestServeAndDropWhileRunning(t *testing.T) {
	c := newCluster(t, "a", "b")
	r := c.start("n1", "", c.etcd.Endpoints(), c.bots[:1])
	c.leaderOf("a", r)
	for round := range 2 {
		if err := r.n.Serve(c.bots[1]); err != nil {
			t.Fatal(err)
		}
		c.leaderOf("b", r)
		if !c.stats("b").Connected {
			t.Fatalf("round %d: b not connected", round)
		}
		<-r.n.Drop("b")
		if r.n.Serves("b") || c.stats("b").Connected {
			t.Fatalf("round %d: b still served or connected after Drop", round)
		}
		if _, ok := r.n.Status()["b"]; ok {
			t.Fatalf("round %d: b still in the status", round)
		}
	}
	// Served again while its loop is still ending: served once it has.
	if err := r.n.Serve(c.bots[1]); err != nil {
		t.Fatal(err)
	}
	c.leaderOf("b", r)
	done := r.n.Drop("b")
	if err := r.n.Serve(c.bots[1]); err != nil {
		t.Fatal(err)
	}
	<-done
	c.leaderOf("b", r)
	if state(r, "a") != node.StateLeader {
		t.Error("a lost meanwhile")
	}
}

// Prove swaps the connection for one with the new secret when WeCom takes
// it (one kick, the node's own), and keeps the connection held when WeCom
// refuses it (no kick), returning WeCom's auth error.
func TestProveNewSecret(t *testing.T) {
	c := newCluster(t, "a")
	r := c.start("n1", "", c.etcd.Endpoints(), c.bots)
	c.leaderOf("a", r)
	if _, ok := r.n.Prove("b", "x"); ok {
		t.Fatal("Prove of a bot not served: ok")
	}
	if err := c.sim.SetSecret("a", "a-new"); err != nil {
		t.Fatal(err)
	}
	prove := func(secret string) error {
		t.Helper()
		var out <-chan error
		testwait.Eventually(t, waitLong, "a led, to prove", func() bool {
			var ok bool
			out, ok = r.n.Prove("a", secret)
			return ok
		})
		return <-out
	}
	if err := prove("a-new"); err != nil {
		t.Fatalf("the right new secret: %v", err)
	}
	st := c.stats("a")
	if !st.Connected || st.Kicks != 1 || state(r, "a") != node.StateLeader {
		t.Fatalf("after the right secret: connected %v, kicks %d, state %s", st.Connected, st.Kicks, state(r, "a"))
	}
	err := prove("wrong")
	if !errors.Is(err, wecom.ErrAuthFailed) {
		t.Fatalf("a wrong secret: %v, want WeCom's auth error", err)
	}
	st = c.stats("a")
	if !st.Connected || st.Kicks != 1 || state(r, "a") != node.StateLeader {
		t.Fatalf("after a wrong secret: connected %v, kicks %d, state %s: want the holder kept", st.Connected, st.Kicks, state(r, "a"))
	}
	res, err := c.sim.PostMessage(wecomsim.MessageRequest{BotID: "a", UserID: "ann", Text: "still there?"})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitLong, "the message read on the connection kept", func() bool { return c.counter.count(res.MsgID) == 1 })
}
