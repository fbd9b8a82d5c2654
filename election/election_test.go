package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/faultproxy"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Generous bounds for a loaded 2-core machine running -race; tests wait on
// events and use these only to fail instead of hanging.
const (
	eventTimeout = 30 * time.Second
	rpcTimeout   = 10 * time.Second
)

func rpcCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	t.Cleanup(cancel)
	return ctx
}

func TestSingleNodeLeads(t *testing.T) {
	leakCheck(t)
	cli := newClient(t, "")
	cfg := testConfig(t, "bot1", "n1", 2*time.Second)
	e := newElector(t, cli, cfg)

	if _, err := Leader(rpcCtx(t), cli, cfg.Prefix, "bot1"); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader before campaign: %v, want ErrNoLeader", err)
	}
	before := time.Now()
	r := await(t, campaign(t, bg(t), e), eventTimeout)
	term := r.term
	if term.Bot != "bot1" || term.Node != "n1" || term.Key != cfg.Prefix+"bot1/"+leaseHex(term.Lease) || term.Lease == 0 || term.Rev == 0 || term.Start.Before(before) {
		t.Fatalf("term = %+v", term)
	}
	if err := term.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	info, err := Leader(rpcCtx(t), cli, cfg.Prefix, "bot1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Node != "n1" || info.Rev != term.Rev || info.Lease != term.Lease || info.Since.IsZero() {
		t.Fatalf("Leader = %+v, want node n1 rev %d lease %x", info, term.Rev, term.Lease)
	}
	// The term outlives several TTLs while renewals succeed.
	deadline := time.Now().Add(3 * cfg.TTL)
	for time.Now().Before(deadline) {
		select {
		case <-term.Done():
			t.Fatalf("term ended while renewing: %v", term.Err())
		case <-time.After(cfg.TTL / 2):
		}
	}
	if err := term.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("Verify after 3 TTLs: %v", err)
	}

	if err := term.Resign(rpcCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := term.Resign(rpcCtx(t)); err != nil {
		t.Fatalf("second Resign: %v", err)
	}
	if !errors.Is(term.Err(), ErrNotLeader) {
		t.Fatalf("Err after Resign = %v, want ErrNotLeader", term.Err())
	}
	if err := term.Verify(rpcCtx(t)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Verify after Resign = %v, want ErrNotLeader", err)
	}
	if _, err := Leader(rpcCtx(t), cli, cfg.Prefix, "bot1"); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader after Resign: %v, want ErrNoLeader", err)
	}
}

// Three nodes campaign in a loop, each holding and resigning; no term ever
// starts while another is live, and Leader always names the holder.
func TestOneLeaderAtATime(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	const nodes, terms = 3, 9
	var (
		mu      sync.Mutex
		current *Term
		count   int
		wg      sync.WaitGroup
		errc    = make(chan error, nodes)
	)
	stop, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := range nodes {
		cli := newClient(t, "")
		e := newElector(t, cli, testConfig(t, "bot", fmt.Sprintf("n%d", i), 5*time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				term, err := e.Campaign(stop)
				if err != nil {
					if stop.Err() == nil {
						errc <- err
					}
					return
				}
				mu.Lock()
				if current != nil && current.Err() == nil {
					mu.Unlock()
					errc <- fmt.Errorf("node %s won term %d while node %s's term %d is live", term.Node, term.Rev, current.Node, current.Rev)
					term.End()
					return
				}
				current = term
				count++
				n := count
				mu.Unlock()
				// Another node that reached the last term cancels stop
				// right after resigning, which may be just after this
				// node won: a read cut by that cancel is not a wrong leader.
				switch info, err := Leader(stop, cli, e.cfg.Prefix, "bot"); {
				case err != nil && stop.Err() != nil:
				case err != nil || info.Node != term.Node || info.Rev != term.Rev:
					errc <- fmt.Errorf("Leader = %+v, %v; want node %s term %d", info, err, term.Node, term.Rev)
				}
				if err := term.Verify(stop); err != nil && stop.Err() == nil {
					errc <- fmt.Errorf("Verify right after winning: %v", err)
				}
				rctx, rcancel := context.WithTimeout(context.Background(), rpcTimeout)
				err = term.Resign(rctx)
				rcancel()
				if err != nil {
					errc <- err
				}
				if n >= terms {
					cancel()
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case err := <-errc:
		cancel()
		<-done
		t.Fatal(err)
	case <-time.After(4 * eventTimeout):
		t.Fatal("handovers did not finish")
	}
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if count < terms {
		t.Fatalf("%d terms, want at least %d", count, terms)
	}
}

func TestResignHandsOverBeforeTTL(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	const ttl = 10 * time.Second
	a := newElector(t, newClient(t, ""), testConfig(t, "bot", "a", ttl))
	b := newElector(t, newClient(t, ""), testConfig(t, "bot", "b", ttl))
	ta := await(t, campaign(t, ctx, a), eventTimeout).term
	bch := campaign(t, ctx, b)

	resigned := time.Now()
	if err := ta.Resign(rpcCtx(t)); err != nil {
		t.Fatal(err)
	}
	rb := await(t, bch, eventTimeout)
	took := rb.at.Sub(resigned)
	t.Logf("takeover after resign: %s (TTL %s)", took, ttl)
	if took >= ttl {
		t.Fatalf("takeover took %s, want well under TTL %s", took, ttl)
	}
	select {
	case <-ta.Done():
	default:
		t.Fatal("a's term still live after b won")
	}
}

func TestCrashWaitsForLease(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	const ttl = 2 * time.Second
	// Without the pulse (a leader that publishes none, e.g. an older
	// botctl), a crash without restart costs the TTL.
	cfg := func(node string) Config {
		c := testConfig(t, "bot", node, ttl)
		c.NoPulse = true
		return c
	}
	acli := newClient(t, "")
	a := newElector(t, acli, cfg("a"))
	b := newElector(t, newClient(t, ""), cfg("b"))
	ta := await(t, campaign(t, ctx, a), eventTimeout).term
	bch := campaign(t, ctx, b)

	// a "crashes": its client goes away without revoking the lease. The
	// lease has at least left (etcd's whole seconds, rounded down) to
	// live from before: b cannot win earlier, however late a's last
	// renewal was.
	before := time.Now()
	ttlResp, err := newClient(t, "").TimeToLive(rpcCtx(t), ta.Lease)
	if err != nil {
		t.Fatal(err)
	}
	left := time.Duration(ttlResp.TTL) * time.Second
	crashed := time.Now()
	acli.Close()
	rb := await(t, bch, eventTimeout)
	t.Logf("takeover after crash: %s (TTL %s, %s left at the crash)", rb.at.Sub(crashed), ttl, left)
	if took := rb.at.Sub(before); took < left {
		t.Fatalf("b won %s after the crash, before a's lease could expire (%s left)", took, left)
	}
	select {
	case <-ta.Done():
	default:
		t.Fatal("a's term still live when b won")
	}
	if !errors.Is(ta.Err(), ErrNotLeader) {
		t.Fatalf("a's term ended with %v, want ErrNotLeader", ta.Err())
	}
}

// The leader reaches etcd through a proxy; the proxy blackholes. The
// leader's term must end before any other node wins.
func TestPartitionedLeaderStopsFirst(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	proxy, err := faultproxy.New("127.0.0.1:0", etcdAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })

	// A margin of half the TTL keeps the ordering robust on a loaded
	// machine: a stops 1.5s before its lease can expire.
	// The pulse is off: this test is about the renewal bound. With it on,
	// a standby may depose the partitioned leader (2-3s after the
	// partition) before its watchdog fires, which costs one WeCom kick by
	// design (see the package comment, "Hung leaders").
	cfg := func(node string) Config {
		c := testConfig(t, "bot", node, 3*time.Second)
		c.SafetyMargin = 1500 * time.Millisecond
		c.NoPulse = true
		return c
	}
	acli := newClient(t, proxy.Addr())
	a := newElector(t, acli, cfg("a"))
	ta := await(t, campaign(t, ctx, a), eventTimeout).term
	// Let one renewal go through the proxy first.
	waitRenewedAfter(t, ta, ta.Start)

	bch := campaign(t, ctx, newElector(t, newClient(t, ""), cfg("b")))
	cch := campaign(t, ctx, newElector(t, newClient(t, ""), cfg("c")))

	partitioned := time.Now()
	proxy.Blackhole()
	var winner result
	select {
	case winner = <-bch:
	case winner = <-cch:
	case <-time.After(eventTimeout):
		t.Fatal("nobody won after the leader was partitioned")
	}
	if winner.err != nil {
		t.Fatal(winner.err)
	}
	t.Cleanup(winner.term.End)
	select {
	case <-ta.Done():
	default:
		t.Fatalf("node %s won while partitioned leader a still leads", winner.term.Node)
	}
	t.Logf("partition: a stopped, then %s won %s after the partition (TTL 3s); a's reason: %v",
		winner.term.Node, winner.at.Sub(partitioned), ta.Err())

	proxy.Heal()
	if err := ta.Verify(rpcCtx(t)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a's Verify after heal = %v, want ErrNotLeader", err)
	}
	if err := winner.term.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("winner's Verify: %v", err)
	}
	// Resigning a lost term does not touch the new leader's key.
	if err := ta.Resign(rpcCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := winner.term.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("winner's Verify after a resigned its lost term: %v", err)
	}
}

func TestKeyDeletedEndsTerm(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	admin := newClient(t, "")
	e := newElector(t, newClient(t, ""), testConfig(t, "bot", "a", 20*time.Second))
	term := await(t, campaign(t, ctx, e), eventTimeout).term

	if _, err := admin.Delete(rpcCtx(t), term.Key); err != nil {
		t.Fatal(err)
	}
	waitDone(t, term, eventTimeout)
	if !errors.Is(term.Err(), ErrNotLeader) {
		t.Fatalf("Err = %v, want ErrNotLeader", term.Err())
	}
	t.Logf("reason: %v", term.Err())
	if err := term.Verify(rpcCtx(t)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Verify = %v, want ErrNotLeader", err)
	}
}

func TestKeyTakenOverEndsTerm(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	admin := newClient(t, "")
	e := newElector(t, newClient(t, ""), testConfig(t, "bot", "a", 20*time.Second))
	term := await(t, campaign(t, ctx, e), eventTimeout).term

	// An operator overwrites the key (no lease): the term is no longer ours.
	if _, err := admin.Put(rpcCtx(t), term.Key, "intruder"); err != nil {
		t.Fatal(err)
	}
	// Verify notices at once, whether or not the watch has.
	if err := term.Verify(rpcCtx(t)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Verify = %v, want ErrNotLeader", err)
	}
	waitDone(t, term, eventTimeout)
	if info, err := Leader(rpcCtx(t), admin, e.cfg.Prefix, "bot"); err != nil || info.Node != "intruder" {
		t.Fatalf("Leader = %+v, %v; want the plain value read as node id", info, err)
	}
}

func TestCampaignCancel(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	a := newElector(t, newClient(t, ""), testConfig(t, "bot", "a", 5*time.Second))
	b := newElector(t, newClient(t, ""), testConfig(t, "bot", "b", 5*time.Second))
	ta := await(t, campaign(t, ctx, a), eventTimeout).term

	bctx, cancel := context.WithCancel(ctx)
	bch := campaign(t, bctx, b)
	waitCandidates(t, newClient(t, ""), a.Name(), 2)
	cancel()
	select {
	case r := <-bch:
		if !errors.Is(r.err, context.Canceled) || r.term != nil {
			t.Fatalf("Campaign after cancel = %v, %v; want context.Canceled", r.term, r.err)
		}
	case <-time.After(eventTimeout):
		t.Fatal("Campaign did not return after cancel")
	}
	if err := ta.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("a's Verify: %v", err)
	}
	// b left the queue (its lease revoked): a stopped standby never holds
	// up the next handover.
	waitCandidates(t, newClient(t, ""), a.Name(), 1)
}

func TestTermEndsWithCampaignContext(t *testing.T) {
	leakCheck(t)
	ctx, cancel := context.WithCancel(bg(t))
	cli := newClient(t, "")
	e := newElector(t, cli, testConfig(t, "bot", "a", 20*time.Second))
	term := await(t, campaign(t, ctx, e), eventTimeout).term
	cancel()
	waitDone(t, term, eventTimeout)
	if !errors.Is(term.Err(), context.Canceled) {
		t.Fatalf("Err = %v, want context.Canceled", term.Err())
	}
	if err := term.Verify(rpcCtx(t)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Verify = %v, want ErrNotLeader", err)
	}
	// Resign still releases the key at once.
	if err := term.Resign(rpcCtx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := Leader(rpcCtx(t), cli, e.cfg.Prefix, "bot"); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader after Resign = %v, want ErrNoLeader", err)
	}
}

// Six bots over three nodes: each bot has exactly one leader, and one bot
// changing hands leaves the others alone.
func TestBotsAreIndependent(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	const nodes, bots = 3, 6
	clis := make([]*clientv3.Client, nodes)
	for i := range clis {
		clis[i] = newClient(t, "")
	}
	chans := make([][]<-chan result, bots)
	for b := range bots {
		for n := range nodes {
			// Rotate start order so leadership tends to spread.
			node := (b + n) % nodes
			e := newElector(t, clis[node], testConfig(t, fmt.Sprintf("bot%d", b), fmt.Sprintf("n%d", node), 5*time.Second))
			chans[b] = append(chans[b], campaign(t, ctx, e))
		}
	}
	leaders := make([]*Term, bots)
	waiting := make([][]<-chan result, bots)
	for b := range bots {
		// Exactly one of each bot's campaigns returns.
		cases := chans[b]
		deadline := time.After(eventTimeout)
		for leaders[b] == nil {
			for i, ch := range cases {
				select {
				case r := <-ch:
					if r.err != nil {
						t.Fatal(r.err)
					}
					t.Cleanup(r.term.End)
					leaders[b] = r.term
					waiting[b] = append(append([]<-chan result(nil), cases[:i]...), cases[i+1:]...)
				default:
				}
				if leaders[b] != nil {
					break
				}
			}
			if leaders[b] == nil {
				select {
				case <-deadline:
					t.Fatalf("bot%d: no leader", b)
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}
	for b, term := range leaders {
		info, err := Leader(rpcCtx(t), clis[0], testConfig(t, "", "", 0).Prefix, fmt.Sprintf("bot%d", b))
		if err != nil || info.Node != term.Node || info.Rev != term.Rev {
			t.Fatalf("bot%d: Leader = %+v, %v; want %s term %d", b, info, err, term.Node, term.Rev)
		}
		for _, ch := range waiting[b] {
			select {
			case r := <-ch:
				t.Fatalf("bot%d: second leader %s while %s leads", b, r.term.Node, term.Node)
			default:
			}
		}
	}
	// Hand bot0 over; bot1..5 keep their terms.
	if err := leaders[0].Resign(rpcCtx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-waiting[0][0]:
		t.Cleanup(r.term.End)
	case r := <-waiting[0][1]:
		t.Cleanup(r.term.End)
	case <-time.After(eventTimeout):
		t.Fatal("bot0: no new leader after resign")
	}
	for b := 1; b < bots; b++ {
		if err := leaders[b].Verify(rpcCtx(t)); err != nil {
			t.Fatalf("bot%d's leader after bot0 changed hands: %v", b, err)
		}
	}
}

// waitRenewedAfter waits until a renewal sent after since has succeeded.
func waitRenewedAfter(t *testing.T, term *Term, since time.Time) {
	t.Helper()
	deadline := time.After(eventTimeout)
	for {
		term.mu.Lock()
		renewed := term.lastRenew.After(since)
		term.mu.Unlock()
		if renewed {
			return
		}
		select {
		case <-term.Done():
			t.Fatalf("term ended: %v", term.Err())
		case <-deadline:
			t.Fatal("no renewal")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A blip shorter than RenewDeadline (connections reset, client redials)
// does not end the term.
func TestTermSurvivesConnectionReset(t *testing.T) {
	leakCheck(t)
	proxy, err := faultproxy.New("127.0.0.1:0", etcdAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	e := newElector(t, newClient(t, proxy.Addr()), testConfig(t, "bot", "a", 3*time.Second))
	term := await(t, campaign(t, bg(t), e), eventTimeout).term

	cut := time.Now()
	proxy.CutAll()
	waitRenewedAfter(t, term, cut)
	if err := term.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("Verify after reset: %v", err)
	}
	// A Verify that cannot reach etcd is an error, but not a verdict: the
	// term goes on.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := term.Verify(ctx); err == nil || errors.Is(err, ErrNotLeader) {
		t.Fatalf("Verify with a cancelled context = %v, want a non-ErrNotLeader error", err)
	}
	if term.Err() != nil {
		t.Fatalf("term ended by a failed Verify: %v", term.Err())
	}
}
