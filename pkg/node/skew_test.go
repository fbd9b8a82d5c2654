package node_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/skew"
)

// A node whose clock is 40 minutes off JetStream's leads nothing: it
// says why, and a node with a good clock takes the bot (issue 25 item 10:
// before, such a node led and gave up tasks at once or counted sends in
// the wrong window).
func TestNodeFortyMinutesOffLeadsNothing(t *testing.T) {
	c := newCluster(t, "b1")
	js := testenv.StartJetStream(t, jetstream.Options{})
	w := &skew.Watch{Max: 5 * time.Second, Probe: skew.Probe{KV: js.Store.Health(), Key: "clock.off",
		Now: func() time.Time { return time.Now().Add(40 * time.Minute) }}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	measured := make(chan struct{})
	go w.Run(ctx, func(skew.Reading, bool) { close(measured) })
	<-measured

	off := c.startWith("off", "default", c.etcd.Endpoints(), c.bots, func(cfg *node.Config) { cfg.Skew = w })
	testwait.Eventually(t, waitLong, "the skewed node to hold back", func() bool { return state(off, "b1") == node.StateClockOff })
	if r := off.n.Status()["b1"].Reason; !strings.Contains(r, "40m") || !strings.Contains(r, "nats.max_clock_skew") {
		t.Fatalf("clock_off reason %q does not say how far off and which key", r)
	}
	good := c.start("good", "default", c.etcd.Endpoints(), c.bots)
	c.leaderOf("b1", off, good)
	if state(good, "b1") != node.StateLeader {
		t.Fatalf("good node: %s, want leader", state(good, "b1"))
	}
}

type flagSkew struct{ off atomic.Bool }

func (c *flagSkew) Off() (string, bool) { return "40m off (a test)", c.off.Load() }

// A node whose clock goes off while it leads hands the bot over, and while
// it waits as a candidate it does not win either; once its clock is right
// it takes part again. Found by the chaos suite's clock-skew: a node
// whose clock was found off only after it had queued as a candidate
// stayed in the queue (and would have led).
func TestClockGoingOffEndsTermAndCandidacy(t *testing.T) {
	c := newCluster(t, "b1")
	ck := &flagSkew{}
	a := c.startWith("a", "default", c.etcd.Endpoints(), c.bots, func(cfg *node.Config) { cfg.Skew = ck })
	c.leaderOf("b1", a)
	b := c.start("b", "default", c.etcd.Endpoints(), c.bots)
	ck.off.Store(true)
	testwait.Eventually(t, waitLong, "b to take over from a leader whose clock went off", func() bool {
		return state(b, "b1") == node.StateLeader && state(a, "b1") == node.StateClockOff
	})
	b.shutdown(t)
	time.Sleep(3 * time.Second) // a negative check: a, clock off, must not win
	if st := state(a, "b1"); st != node.StateClockOff {
		t.Fatalf("a, clock off, is %s after the leader left", st)
	}
	ck.off.Store(false)
	c.leaderOf("b1", a)
}
