package serve

import (
	"context"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/botctl/botctl/pkg/heal/incident"
)

// A graceful stop (SIGTERM, a deploy) hands the bot over: the next leader
// reads a record saying so and opens no incident. Each node's health
// monitor outlives its node, so the stopped node's last record is written
// before the next leader reads it.
func TestGracefulStopIsNotAnIncident(t *testing.T) {
	t.Parallel()
	e := startEtcd(t)
	ns := startNATS(t)
	wecomURL := startSim(t)
	n1, err := startNode(t, nodeConfig(t, wecomURL, e, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv := n1.Store.Health()
	testwait.Eventually(t, time.Minute, "n1 online", func() bool {
		r, err := health.Load(ctx, kv, "b1")
		return err == nil && r.Node == "n1" && r.State == health.Online
	})
	cfg2 := nodeConfig(t, wecomURL, e, ns.ClientURL())
	cfg2.NodeID = "n2"
	n2, err := startNode(t, cfg2)
	if err != nil {
		t.Fatal(err)
	}
	if err := n1.Stop(); err != nil {
		t.Fatalf("n1 stopped with %v", err)
	}
	kv = n2.Store.Health() // n1's connection is closed
	testwait.Eventually(t, time.Minute, "n2 online", func() bool {
		r, err := health.Load(ctx, kv, "b1")
		return err == nil && r.Node == "n2" && r.State == health.Online
	})
	all, err := incident.NewStore(n2.Store.Incidents()).List(ctx, incident.Filter{Bot: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range all {
		t.Errorf("a graceful stop opened an incident: %s: %s", i.Signal, i.Reason)
	}
}
