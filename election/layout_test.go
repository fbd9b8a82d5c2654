package election

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/faultproxy"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// waitCandidates waits until the election named name has n candidate keys.
func waitCandidates(t *testing.T, cli *clientv3.Client, name string, n int64) {
	t.Helper()
	deadline := time.After(eventTimeout)
	for {
		resp, err := cli.Get(rpcCtx(t), name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == n {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("%s: want %d candidates, last count %+v (%v)", name, n, resp, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Candidates are served in the order they joined: a leads, b joins, then
// c; a resigns and b (not c) wins, then c.
func TestCandidatesServedInOrder(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	admin := newClient(t, "")
	const ttl = 10 * time.Second
	a := newElector(t, newClient(t, ""), testConfig(t, "bot", "a", ttl))
	b := newElector(t, newClient(t, ""), testConfig(t, "bot", "b", ttl))
	c := newElector(t, newClient(t, ""), testConfig(t, "bot", "c", ttl))
	ta := await(t, campaign(t, ctx, a), eventTimeout).term
	bch := campaign(t, ctx, b)
	waitCandidates(t, admin, a.Name(), 2)
	cch := campaign(t, ctx, c)
	waitCandidates(t, admin, a.Name(), 3)

	if err := ta.Resign(rpcCtx(t)); err != nil {
		t.Fatal(err)
	}
	var tb *Term
	select {
	case r := <-bch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		tb = r.term
		t.Cleanup(tb.End)
	case r := <-cch:
		t.Fatalf("c won before b, which joined first: %+v", r)
	case <-time.After(eventTimeout):
		t.Fatal("nobody won after a resigned")
	}
	select {
	case r := <-cch:
		t.Fatalf("c won while b leads: %+v", r)
	default:
	}
	if err := tb.Resign(rpcCtx(t)); err != nil {
		t.Fatal(err)
	}
	tc := await(t, cch, eventTimeout).term
	if err := tc.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("c's Verify: %v", err)
	}
}

// Two bots, two nodes: Leader, concurrency.Election's own Leader and
// Observe name exactly each bot's leader, and follow a handover.
func TestLeaderIsConcurrencyElectionLeader(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	admin := newClient(t, "")
	c1, c2 := newClient(t, ""), newClient(t, "")
	const ttl = 10 * time.Second
	// n1 leads bot1, n2 leads bot2; each is the other's standby.
	e11 := newElector(t, c1, testConfig(t, "bot1", "n1", ttl))
	e22 := newElector(t, c2, testConfig(t, "bot2", "n2", ttl))
	t1 := await(t, campaign(t, ctx, e11), eventTimeout).term
	t2 := await(t, campaign(t, ctx, e22), eventTimeout).term
	standby1 := campaign(t, ctx, newElector(t, c2, testConfig(t, "bot1", "n2", ttl)))
	campaign(t, ctx, newElector(t, c1, testConfig(t, "bot2", "n1", ttl)))
	waitCandidates(t, admin, e11.Name(), 2)
	waitCandidates(t, admin, e22.Name(), 2)

	sess, err := concurrency.NewSession(admin, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	prefix := testConfig(t, "", "", 0).Prefix
	for _, term := range []*Term{t1, t2} {
		info, err := Leader(rpcCtx(t), admin, prefix, term.Bot)
		if err != nil || info.Node != term.Node || info.Key != term.Key || info.Rev != term.Rev || info.Lease != term.Lease || info.Since.IsZero() {
			t.Fatalf("%s: Leader = %+v, %v; want %s's term %+v", term.Bot, info, err, term.Node, term)
		}
		resp, err := concurrency.NewElection(sess, prefix+term.Bot).Leader(rpcCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		var v value
		if kv := resp.Kvs[0]; string(kv.Key) != term.Key || json.Unmarshal(kv.Value, &v) != nil || v.Node != term.Node {
			t.Fatalf("%s: concurrency.Election.Leader = %s = %s, want %s (node %s)", term.Bot, kv.Key, kv.Value, term.Key, term.Node)
		}
	}

	octx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	obs, err := Observe(octx, admin, prefix, "bot1")
	if err != nil {
		t.Fatal(err)
	}
	next := func() LeaderInfo {
		t.Helper()
		select {
		case info, ok := <-obs:
			if !ok {
				t.Fatal("Observe closed")
			}
			return info
		case <-time.After(eventTimeout):
			t.Fatal("Observe reported nothing")
			return LeaderInfo{}
		}
	}
	if info := next(); info.Node != "n1" || info.Key != t1.Key {
		t.Fatalf("Observe first = %+v, want n1's term", info)
	}
	if err := t1.Resign(rpcCtx(t)); err != nil {
		t.Fatal(err)
	}
	t1b := await(t, standby1, eventTimeout).term
	// The new leader appears (first with its candidate value, then as
	// proclaimed with its start time).
	for {
		info := next()
		if info.Node != "n2" || info.Key != t1b.Key {
			t.Fatalf("Observe after handover = %+v, want n2's term %s", info, t1b.Key)
		}
		if !info.Since.IsZero() {
			break
		}
	}
	if err := t2.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("bot2's leader after bot1 changed hands: %v", err)
	}
	stopObserving()
	for range obs { // closes once ctx has ended
	}
}

// A key of the old layout (an old botctl node leading) forbids leading:
// Verify refuses, and a live term ends the moment such a key appears.
func TestLegacyKeyForbidsLeading(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	admin := newClient(t, "")
	cfg := testConfig(t, "bot", "new", 10*time.Second)
	e := newElector(t, newClient(t, ""), cfg)
	oldLease, err := admin.Grant(rpcCtx(t), 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Revoke(context.Background(), oldLease.ID) })
	putLegacy := func() {
		t.Helper()
		if _, err := admin.Put(rpcCtx(t), e.LegacyKey(), `{"node":"old","since":"2026-01-02T15:04:05Z"}`, clientv3.WithLease(oldLease.ID)); err != nil {
			t.Fatal(err)
		}
	}
	putLegacy()

	term := await(t, campaign(t, ctx, e), eventTimeout).term
	err = term.Verify(rpcCtx(t))
	if !errors.Is(err, ErrLegacyLeader) || !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Verify with an old-layout key = %v, want ErrLegacyLeader and ErrNotLeader", err)
	}
	t.Logf("verify: %v", err)
	waitDone(t, term, eventTimeout)
	if err := term.Resign(rpcCtx(t)); err != nil {
		t.Fatal(err)
	}

	// The old node stops: its key goes, and the new node leads.
	if _, err := admin.Delete(rpcCtx(t), e.LegacyKey()); err != nil {
		t.Fatal(err)
	}
	term2 := await(t, campaign(t, ctx, e), eventTimeout).term
	if err := term2.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("Verify with no old-layout key: %v", err)
	}
	// An old node wins its old election meanwhile: the term ends at once.
	putLegacy()
	waitDone(t, term2, eventTimeout)
	if !errors.Is(term2.Err(), ErrLegacyLeader) {
		t.Fatalf("term ended with %v, want ErrLegacyLeader", term2.Err())
	}
}

// An old-layout key that came and went while a candidate waited does not
// end the candidate's term once it wins: the term's watches start at the
// revision it was confirmed at.
func TestLegacyKeyWhileQueuedIsPast(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	admin := newClient(t, "")
	a := newElector(t, newClient(t, ""), testConfig(t, "bot", "a", 10*time.Second))
	b := newElector(t, newClient(t, ""), testConfig(t, "bot", "b", 10*time.Second))
	ta := await(t, campaign(t, ctx, a), eventTimeout).term
	bch := campaign(t, ctx, b)
	waitCandidates(t, admin, a.Name(), 2)
	if _, err := admin.Put(rpcCtx(t), b.LegacyKey(), `{"node":"old"}`); err != nil {
		t.Fatal(err)
	}
	del, err := admin.Delete(rpcCtx(t), b.LegacyKey())
	if err != nil {
		t.Fatal(err)
	}
	if err := ta.Resign(rpcCtx(t)); err != nil {
		t.Fatal(err)
	}
	tb := await(t, bch, eventTimeout).term
	if tb.watchFrom < del.Header.Revision {
		t.Fatalf("b's term watches from revision %d, before the old-layout key's delete at %d", tb.watchFrom, del.Header.Revision)
	}
	if err := tb.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("b's Verify: %v", err)
	}
}

// Check is nil while the term lasts and ErrNotLeader once it has ended,
// without a read.
func TestCheck(t *testing.T) {
	leakCheck(t)
	term := await(t, campaign(t, bg(t), newElector(t, newClient(t, ""), testConfig(t, "bot", "a", 10*time.Second))), eventTimeout).term
	if err := term.Check(); err != nil {
		t.Fatalf("Check on a live term: %v", err)
	}
	term.End()
	if err := term.Check(); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Check after End = %v, want ErrNotLeader", err)
	}
}

// A candidate told to stop while etcd is unreachable returns within about
// a TTL (its lease is then gone anyway), not when etcd answers again:
// concurrency.Election withdraws a cancelled candidacy with its client's
// context, which Campaign bounds.
func TestCampaignCancelWhileEtcdUnreachable(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	proxy, err := faultproxy.New("127.0.0.1:0", etcdAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	const ttl = 3 * time.Second
	admin := newClient(t, "")
	a := newElector(t, newClient(t, ""), testConfig(t, "bot", "a", ttl))
	b := newElector(t, newClient(t, proxy.Addr()), testConfig(t, "bot", "b", ttl))
	await(t, campaign(t, ctx, a), eventTimeout)
	bctx, stopB := context.WithCancel(ctx)
	bch := campaign(t, bctx, b)
	waitCandidates(t, admin, a.Name(), 2)

	proxy.Blackhole()
	stopped := time.Now()
	stopB()
	select {
	case r := <-bch:
		if r.term != nil || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("Campaign = %+v, want context.Canceled", r)
		}
		t.Logf("Campaign returned %s after the stop, etcd unreachable", r.at.Sub(stopped))
	case <-time.After(eventTimeout):
		t.Fatal("Campaign still blocked with etcd unreachable")
	}
	proxy.Heal()
	// b's candidacy is gone (revoked, or expired while unreachable).
	waitCandidates(t, admin, a.Name(), 1)
}
