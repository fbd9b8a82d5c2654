package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/dataplane"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/node"
)

// A node whose clock is 40 minutes off JetStream's leads nothing: it
// says why, and a node with a good clock takes the bot (issue 25 item 10:
// before, such a node led and gave up tasks at once or counted sends in
// the wrong window).
func TestNodeFortyMinutesOffLeadsNothing(t *testing.T) {
	c := newCluster(t, "b1")
	js := testenv.StartJetStream(t, dataplane.Options{})
	w := &clock.Watch{Max: 5 * time.Second, Probe: clock.Probe{KV: js.Store.Health(), Key: "clock.off",
		Now: func() time.Time { return time.Now().Add(40 * time.Minute) }}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	measured := make(chan struct{})
	go w.Run(ctx, func(clock.Reading, bool) { close(measured) })
	<-measured

	off := c.startWith("off", "default", c.etcd.Endpoints(), c.bots, func(cfg *node.Config) { cfg.Clock = w })
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
