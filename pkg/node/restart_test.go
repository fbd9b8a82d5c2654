package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/internal/faultproxy"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/node"
)

// kill -9 and a systemd restart: the leader vanishes from etcd without
// resigning (its lease would live on for most of the TTL); the node
// restarts with the same data dir, revokes that lease before campaigning,
// and the standby takes over at once.
func TestRestartedNodeRevokesItsCrashedLease(t *testing.T) {
	c := newCluster(t, "b1")
	// Long, so that the crashed lease is surely still alive when the node
	// restarts (its shutdown behind the dead proxy waits out its etcd
	// timeouts, several seconds) and its own expiry cannot explain the
	// takeover.
	const ttl = 60 * time.Second
	proxy, err := faultproxy.New("127.0.0.1:0", strings.TrimPrefix(c.etcd.Endpoints()[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	dataDir := t.TempDir()
	// a pulses (so its lease holds its pulse key too, which its restart
	// must revoke all the same); b has the pulse off, so it deposes
	// nobody and only the lease file can explain a takeover before the
	// TTL (TestPartitionedLeaderIsDeposedWithOneKick covers deposition).
	withTTL := func(dir string, pulse bool) func(*node.Config) {
		return func(cfg *node.Config) {
			cfg.Election = election.Config{TTL: ttl, NoPulse: !pulse}
			cfg.DataDir = dir
		}
	}
	a := c.startWith("a", "default", []string{"http://" + proxy.Addr()}, c.bots, withTTL(dataDir, true))
	c.leaderOf("b1", a)
	crashed, err := election.Leader(context.Background(), c.admin, "", "b1")
	if err != nil {
		t.Fatal(err)
	}
	b := c.startWith("b", "default", c.etcd.Endpoints(), c.bots, withTTL(t.TempDir(), false))
	testwait.Eventually(t, waitLong, "b to stand by", func() bool { return state(b, "b1") == node.StateStandby })

	// The process dies: etcd never hears from it again. Stopping the node
	// behind the closed proxy closes its WeCom connection (as the kernel
	// does for a killed process); its resign cannot reach etcd.
	proxy.Close()
	cut := time.Now()
	a.shutdown(t)
	left, err := c.admin.TimeToLive(context.Background(), crashed.Lease)
	if err != nil || left.TTL <= 0 {
		t.Fatalf("crashed leader's lease: %+v (%v), want it alive (nothing revoked it)", left, err)
	}
	if state(b, "b1") == node.StateLeader {
		t.Fatal("b leads before a restarted")
	}

	restarted := time.Now()
	a2 := c.startWith("a", "default", c.etcd.Endpoints(), c.bots, withTTL(dataDir, true))
	c.leaderOf("b1", b, a2)
	if state(b, "b1") != node.StateLeader {
		t.Fatal("the restarted node leads, not the standby that queued first")
	}
	took := time.Since(restarted)
	t.Logf("takeover %s after the restart, %s after the crash; the crashed lease had %ds left (TTL %s)", took, time.Since(cut), left.TTL, ttl)
	if ttlResp, err := c.admin.TimeToLive(context.Background(), crashed.Lease); err != nil || ttlResp.TTL != -1 {
		t.Fatalf("crashed leader's lease after the restart: %+v (%v), want it revoked", ttlResp, err)
	}
	if lived := time.Duration(left.TTL) * time.Second; took >= lived {
		t.Fatalf("takeover %s after the restart: not before the lease's own expiry (%s)", took, lived)
	}
}

// A rolling upgrade: while a node of the old layout holds the bot (its key
// /botctl/election/<bot> exists), a new node does not connect, and its
// state says why; once the old key is gone it leads.
func TestOldLayoutLeaderHoldsOffNewNode(t *testing.T) {
	c := newCluster(t, "b1")
	legacy := election.DefaultLegacyPrefix + "b1"
	if _, err := c.admin.Put(context.Background(), legacy, `{"node":"old"}`); err != nil {
		t.Fatal(err)
	}
	a := c.start("a", "default", c.etcd.Endpoints(), c.bots)
	testwait.Eventually(t, waitLong, "a to back off for the old leader", func() bool {
		st := a.n.Status()["b1"]
		return st.State == node.StateBackoff && strings.Contains(st.Reason, "older botctl")
	})
	if s := c.stats("b1"); s.Connected || s.Connections != 0 {
		t.Fatalf("a connected while an old-layout leader holds the bot: %+v", s)
	}
	if _, err := c.admin.Delete(context.Background(), legacy); err != nil {
		t.Fatal(err)
	}
	c.leaderOf("b1", a)
}
