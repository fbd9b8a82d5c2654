package election

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A leader crashes (its client is gone, its lease is not revoked and would
// live on for most of the TTL); the node restarts with the same lease file
// and revokes that lease before campaigning, so the standby takes over at
// once, not after the TTL.
func TestRestartRevokesPreviousLease(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	admin := newClient(t, "")
	const ttl = 20 * time.Second // the production default: waiting it out would fail the test
	file := filepath.Join(t.TempDir(), "election", "bot.lease")
	// a pulses (its lease then holds its pulse key too, which the restart
	// must revoke all the same); b deposes nobody (NoPulse), so that only
	// the lease file can explain a takeover before the TTL.
	cfgA := testConfig(t, "bot", "a", ttl)
	cfgA.LeaseFile = file
	cfgB := testConfig(t, "bot", "b", ttl)
	cfgB.NoPulse = true
	acli := newClient(t, "")
	ta := await(t, campaign(t, ctx, newElector(t, acli, cfgA)), eventTimeout).term
	if raw, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(raw)) != leaseHex(ta.Lease) {
		t.Fatalf("lease file = %q (%v), want %s", raw, err, leaseHex(ta.Lease))
	}
	b := newElector(t, newClient(t, ""), cfgB)
	bch := campaign(t, ctx, b)
	waitCandidates(t, admin, b.Name(), 2)

	// kill -9: nothing is resigned or revoked.
	acli.Close()
	waitDone(t, ta, eventTimeout)
	if resp, err := admin.TimeToLive(rpcCtx(t), ta.Lease); err != nil || resp.TTL <= 0 {
		t.Fatalf("crashed leader's lease: %+v (%v), want it still alive", resp, err)
	}
	select {
	case r := <-bch:
		t.Fatalf("b won before a restarted: %+v", r)
	default:
	}

	restarted := time.Now()
	a2 := newElector(t, newClient(t, ""), cfgA)
	a2ch := campaign(t, ctx, a2)
	rb := await(t, bch, eventTimeout)
	took := rb.at.Sub(restarted)
	t.Logf("takeover %s after the restart (TTL %s)", took, ttl)
	// Without the revoke b waits until the lease expires: at least
	// TTL-RenewInterval (13s) after the crash.
	if took > ttl/4 {
		t.Fatalf("b won %s after the restart, want well under the TTL %s", took, ttl)
	}
	if resp, err := admin.TimeToLive(rpcCtx(t), ta.Lease); err != nil || resp.TTL != -1 {
		t.Fatalf("crashed leader's lease after the restart: %+v (%v), want it revoked", resp, err)
	}
	// The restarted node queues behind b with a new lease, recorded.
	waitCandidates(t, admin, b.Name(), 2)
	raw, err := os.ReadFile(file)
	if err != nil || strings.TrimSpace(string(raw)) == leaseHex(ta.Lease) {
		t.Fatalf("lease file after restart = %q (%v), want the new candidacy's lease", raw, err)
	}
	select {
	case r := <-a2ch:
		t.Fatalf("restarted a won while b leads: %+v", r)
	default:
	}
	// A clean resign forgets the lease.
	if err := rb.term.Resign(rpcCtx(t)); err != nil {
		t.Fatal(err)
	}
	ta2 := await(t, a2ch, eventTimeout).term
	if err := ta2.Resign(rpcCtx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("lease file after Resign: %v, want it removed", err)
	}
}

// A lease file naming a lease that holds other keys (not this bot's
// candidacy) is not acted on: the lease is left alone.
func TestRestartLeavesForeignLease(t *testing.T) {
	leakCheck(t)
	admin := newClient(t, "")
	lease, err := admin.Grant(rpcCtx(t), 30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Revoke(rpcCtx(t), lease.ID) })
	if _, err := admin.Put(rpcCtx(t), testPrefix(t)+"something-else", "x", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "bot.lease")
	if err := os.WriteFile(file, []byte(leaseHex(lease.ID)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "bot", "a", 10*time.Second)
	cfg.LeaseFile = file
	term := await(t, campaign(t, bg(t), newElector(t, newClient(t, ""), cfg)), eventTimeout).term
	if resp, err := admin.TimeToLive(rpcCtx(t), lease.ID); err != nil || resp.TTL <= 0 {
		t.Fatalf("foreign lease: %+v (%v), want it alive", resp, err)
	}
	if term.Lease == lease.ID {
		t.Fatal("term reuses the foreign lease")
	}
}

// A data dir copied to another node (a cloned VM: another node id, the
// same lease file) does not revoke the live leader's lease: the lease's
// candidacy names another node (issue 25 item 10; before, the clone
// revoked it and the live leader lost its term).
func TestCopiedLeaseFileLeavesTheLiveLeader(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	admin := newClient(t, "")
	dir := t.TempDir()
	cfgA := testConfig(t, "bot", "a", 20*time.Second)
	cfgA.LeaseFile = filepath.Join(dir, "a", "bot.lease")
	ta := await(t, campaign(t, ctx, newElector(t, newClient(t, ""), cfgA)), eventTimeout).term

	raw, err := os.ReadFile(cfgA.LeaseFile)
	if err != nil {
		t.Fatal(err)
	}
	cfgB := testConfig(t, "bot", "b", 20*time.Second)
	cfgB.LeaseFile = filepath.Join(dir, "b", "bot.lease")
	if err := os.MkdirAll(filepath.Dir(cfgB.LeaseFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgB.LeaseFile, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	b := newElector(t, newClient(t, ""), cfgB)
	campaign(t, ctx, b)
	waitCandidates(t, admin, b.Name(), 2) // b has revoked or left a's lease and queued
	if resp, err := admin.TimeToLive(rpcCtx(t), ta.Lease); err != nil || resp.TTL <= 0 {
		t.Fatalf("the live leader's lease after a clone started with its lease file: %+v (%v), want it alive", resp, err)
	}
	select {
	case <-ta.Done():
		t.Fatal("the live leader's term ended when a clone started with its lease file")
	default:
	}
}
