package serve

import (
	"strings"
	"testing"

	"github.com/botctl/botctl/internal/testenv"
)

// A node runs on a NATS server in operator mode from nats.creds_file
// alone: it binds JetStream in its account (streams and buckets declared).
// With a creds file of an account the server does not know, Run stops
// with an error naming nats.creds_file instead of waiting for JetStream
// forever.
func TestRunWithCredsFileOnOperatorNATS(t *testing.T) {
	t.Parallel()
	e := startEtcd(t)
	wecomURL := startSim(t)
	ns := testenv.StartOperatorNATS(t, "BOTCTL")

	cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
	cfg.NATS.CredsFile = ns.Creds(t, t.TempDir(), "BOTCTL")
	rn, err := startNode(t, cfg)
	if err != nil {
		t.Fatalf("Run with the account's creds: %v", err)
	}
	if got := rn.Store.Names().TaskStream; got != "BOTCTL_TASKS" {
		t.Fatalf("task stream %s, want BOTCTL_TASKS", got)
	}

	foreign := nodeConfig(t, wecomURL, e, ns.ClientURL())
	foreign.NodeID = "n2"
	foreign.NATS.CredsFile = testenv.ForeignCreds(t, t.TempDir())
	_, err = startNode(t, foreign)
	t.Logf("Run with an unknown account's creds: %v", err)
	if err == nil || !strings.Contains(err.Error(), "config key nats.creds_file") {
		t.Fatalf("Run with an unknown account's creds = %v, want an error naming nats.creds_file", err)
	}
}
