package election

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// holdPulses pauses e's pulses and renewals (what a hung process does to
// them; its etcd client's own keep-alive stream goes on, so the lease
// does not expire: only the pulse can tell). The returned func resumes.
func holdPulses(e *Elector) (resume func()) {
	ch := make(chan struct{})
	e.hold.Store(&ch)
	var once sync.Once
	return func() {
		once.Do(func() {
			e.hold.Store(nil)
			close(ch)
		})
	}
}

// watchPulses reports every pulse written for bot under cfg's PulsePrefix,
// from now on, with the time it was seen.
func watchPulses(t *testing.T, cli *clientv3.Client, cfg Config) <-chan time.Time {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out := make(chan time.Time, 1024)
	wch := cli.Watch(ctx, cfg.PulsePrefix+cfg.BotID)
	go func() {
		for wr := range wch {
			for _, ev := range wr.Events {
				if ev.IsModify() || ev.IsCreate() {
					select {
					case out <- time.Now():
					default:
					}
				}
			}
		}
	}()
	return out
}

// A leader whose pulse and renewals stop (a hung process) while its lease
// stays alive (TTL 20s) is deposed by the standby within about
// PulseTimeout, not after the TTL; the deposed leader's term ends (its key
// watch sees the deletion), and its lease is revoked.
func TestHungLeaderIsDeposed(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	admin := newClient(t, "")
	const ttl = 20 * time.Second
	a := newElector(t, newClient(t, ""), testConfig(t, "bot", "a", ttl))
	b := newElector(t, newClient(t, ""), testConfig(t, "bot", "b", ttl))
	ta := await(t, campaign(t, ctx, a), eventTimeout).term
	pulses := watchPulses(t, admin, a.cfg)
	bch := campaign(t, ctx, b)
	waitCandidates(t, admin, b.Name(), 2)
	// One pulse seen after b joined, so b watches a pulsing leader.
	select {
	case <-pulses:
	case <-time.After(eventTimeout):
		t.Fatal("no pulse from the leader")
	}

	hung := time.Now()
	resume := holdPulses(a)
	defer resume()
	rb := await(t, bch, eventTimeout)
	took := rb.at.Sub(hung)
	pt := b.cfg.PulseTimeout
	t.Logf("hung leader replaced after %s (PulseTimeout %s, PulseInterval %s, TTL %s)", took, pt, b.cfg.PulseInterval, ttl)
	// The live leader was not deposed: b won only once a hung. That b
	// waits out PulseTimeout from the last pulse it saw is the stall
	// decision's (TestStallDecision, on a fake clock): measured here from
	// the test's hang, it would also count the last pulse's write
	// latency, which the machine's load sets.
	if took <= 0 {
		t.Fatalf("b won %s before a hung: a live leader deposed", -took)
	}
	// A bound on a bug (a TTL wait), not a benchmark: the bench measures.
	if took >= ttl/2 {
		t.Fatalf("b won %s after the hang, want about PulseTimeout %s, well under the TTL %s", took, pt, ttl)
	}
	// Counted right after the deposing transaction returns, which can be
	// after b's campaign saw the key go: wait for it.
	for deadline := time.Now().Add(eventTimeout); b.Depositions() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("b's depositions = %d, want 1", b.Depositions())
		}
	}
	waitDone(t, ta, eventTimeout)
	if !errors.Is(ta.Err(), ErrNotLeader) {
		t.Fatalf("deposed term ended with %v, want ErrNotLeader", ta.Err())
	}
	t.Logf("deposed leader's reason: %v", ta.Err())
	// The lease is revoked right after the deposing transaction; the
	// deposed term may have ended (its key watch) before that.
	for deadline := time.Now().Add(eventTimeout); ; time.Sleep(20 * time.Millisecond) {
		resp, err := admin.TimeToLive(rpcCtx(t), ta.Lease)
		if err == nil && resp.TTL == -1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deposed leader's lease: %+v (%v), want it revoked", resp, err)
		}
	}
	// Resumed, the deposed node does not lead: Verify refuses.
	resume()
	if err := ta.Verify(rpcCtx(t)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("deposed leader's Verify = %v, want ErrNotLeader", err)
	}
	if err := rb.term.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("new leader's Verify: %v", err)
	}
	info, err := Leader(rpcCtx(t), admin, b.cfg.Prefix, "bot")
	if err != nil || info.Node != "b" || info.PulseTimeout != pt {
		t.Fatalf("Leader = %+v (%v), want b advertising PulseTimeout %s", info, err, pt)
	}
}

// A leader that pauses for 1s at a time (a GC pause, a loaded machine),
// over and over, is never deposed: 1s plus the pulse interval stays under
// PulseTimeout (3s).
func TestPausingLeaderIsNotDeposed(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	admin := newClient(t, "")
	const ttl = 20 * time.Second
	a := newElector(t, newClient(t, ""), testConfig(t, "bot", "a", ttl))
	b := newElector(t, newClient(t, ""), testConfig(t, "bot", "b", ttl))
	ta := await(t, campaign(t, ctx, a), eventTimeout).term
	pulses := watchPulses(t, admin, a.cfg)
	bch := campaign(t, ctx, b)
	waitCandidates(t, admin, b.Name(), 2)

	const pauses = 8
	var longest time.Duration
	last := time.Now()
	for i := range pauses {
		// Wait for a pulse, then pause right after it: the longest gap.
		select {
		case at := <-pulses:
			longest = max(longest, at.Sub(last))
			last = at
		case <-ta.Done():
			t.Fatalf("pause %d: leader's term ended: %v", i, ta.Err())
		case <-time.After(eventTimeout):
			t.Fatalf("pause %d: no pulse", i)
		}
		resume := holdPulses(a)
		time.Sleep(time.Second) // the pause itself is what is tested
		resume()
	}
	select {
	case <-pulses:
	case <-time.After(eventTimeout):
		t.Fatal("no pulse after the last pause")
	}
	t.Logf("%d pauses of 1s; longest gap between pulses seen %s (PulseTimeout %s)", pauses, longest, b.cfg.PulseTimeout)
	if n := b.Depositions(); n != 0 {
		t.Fatalf("b deposed a pausing leader %d times", n)
	}
	if err := ta.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("pausing leader's Verify: %v", err)
	}
	select {
	case r := <-bch:
		t.Fatalf("b won while a only paused: %+v", r)
	default:
	}
}

// A leader that publishes no pulse (NoPulse, or an older botctl) says so
// in its election value and is never deposed, even by a standby with a
// short PulseTimeout; it is replaced after the TTL as before.
func TestLeaderWithoutPulseIsNeverDeposed(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	admin := newClient(t, "")
	cfgA := testConfig(t, "bot", "a", 20*time.Second)
	cfgA.NoPulse = true
	a := newElector(t, newClient(t, ""), cfgA)
	cfgB := testConfig(t, "bot", "b", 20*time.Second)
	cfgB.PulseInterval, cfgB.PulseTimeout = 100*time.Millisecond, 200*time.Millisecond
	b := newElector(t, newClient(t, ""), cfgB)
	ta := await(t, campaign(t, ctx, a), eventTimeout).term
	bch := campaign(t, ctx, b)
	waitCandidates(t, admin, b.Name(), 2)
	info, err := Leader(rpcCtx(t), admin, cfgA.Prefix, "bot")
	if err != nil || info.PulseTimeout != 0 {
		t.Fatalf("Leader = %+v (%v), want no pulse advertised", info, err)
	}
	if resp, err := admin.Get(rpcCtx(t), cfgA.PulsePrefix+"bot"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("pulse key of a NoPulse leader: %+v (%v), want none", resp, err)
	}
	// An absence is tested over a fixed stretch: ten of b's timeouts.
	time.Sleep(10 * cfgB.PulseTimeout)
	if n := b.Depositions(); n != 0 {
		t.Fatalf("b deposed a leader without pulse %d times", n)
	}
	if err := ta.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("a's Verify: %v", err)
	}
	select {
	case r := <-bch:
		t.Fatalf("b won: %+v", r)
	default:
	}
}

// The leader's pulse is the only write it makes while it holds a term: one
// transaction per PulseInterval. Measured here over a few seconds: writes
// per second (etcd revisions) and the request's size on the wire.
func TestPulseWriteCost(t *testing.T) {
	leakCheck(t)
	admin := newClient(t, "")
	cfg := testConfig(t, "bot-0001", "node-01", 20*time.Second)
	cfg.Prefix, cfg.LegacyPrefix, cfg.PulsePrefix = DefaultPrefix, DefaultLegacyPrefix, DefaultPulsePrefix
	// The production prefixes, so that the sizes are production's; the
	// bot id is unique to this test run in the shared etcd.
	cfg.BotID = "cost" + time.Now().Format("150405.000000")
	e := newElector(t, newClient(t, ""), cfg)
	term := await(t, campaign(t, bg(t), e), eventTimeout).term
	pulses := watchPulses(t, admin, cfg)
	<-pulses
	start, err := admin.Get(rpcCtx(t), "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	const window = 5 * time.Second
	n := 0
	for time.Since(began) < window {
		select {
		case <-pulses:
			n++
		case <-time.After(eventTimeout):
			t.Fatal("no pulse")
		}
	}
	end, err := admin.Get(rpcCtx(t), "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(began)
	revs := end.Header.Revision - start.Header.Revision
	val, _ := json.Marshal(pulseValue{Node: cfg.NodeID, TermRev: term.Rev})
	req := &pb.TxnRequest{
		Compare: []*pb.Compare{{Result: pb.Compare_EQUAL, Target: pb.Compare_CREATE, Key: []byte(term.Key),
			TargetUnion: &pb.Compare_CreateRevision{CreateRevision: term.Rev}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{
			Key: []byte(e.pulseKey), Value: val, Lease: int64(term.Lease)}}}},
	}
	perSec := float64(n) / elapsed.Seconds()
	t.Logf("pulse cost per led bot: %.2f writes/s (%d pulses, %d etcd revisions in %s; interval %s); request %d bytes (key %d, value %d: %s)",
		perSec, n, revs, elapsed.Round(time.Millisecond), e.cfg.PulseInterval, proto.Size(req), len(e.pulseKey), len(val), val)
	// Other tests share this etcd, so revisions are an upper bound; the
	// pulses seen must not outrun the interval (the cost), and must keep
	// coming. The lower bound is half the interval's count: a loaded
	// machine can stall the pulse writer for seconds, which is the
	// deposition tests' subject, not this one's.
	want := elapsed.Seconds() / e.cfg.PulseInterval.Seconds()
	if float64(n) > want+2 || float64(n) < want/2 {
		t.Fatalf("%d pulses in %s, want about %.0f", n, elapsed.Round(time.Millisecond), want)
	}
}

// A standby that is itself slow (paused for longer than PulseTimeout while
// the leader keeps pulsing) finds, when it resumes, its timer expired but
// the pulse moved: it does not depose.
func TestSlowStandbyDoesNotDepose(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	admin := newClient(t, "")
	const ttl = 20 * time.Second
	a := newElector(t, newClient(t, ""), testConfig(t, "bot", "a", ttl))
	b := newElector(t, newClient(t, ""), testConfig(t, "bot", "b", ttl))
	ta := await(t, campaign(t, ctx, a), eventTimeout).term
	pulses := watchPulses(t, admin, a.cfg)
	bch := campaign(t, ctx, b)
	waitCandidates(t, admin, b.Name(), 2)
	<-pulses

	for range 3 {
		resume := holdPulses(b) // b's pulse watch stops handling events
		time.Sleep(b.cfg.PulseTimeout + b.cfg.PulseInterval)
		resume()
		// Two more pulses: b has handled what piled up meanwhile.
		for range 2 {
			select {
			case <-pulses:
			case <-time.After(eventTimeout):
				t.Fatal("no pulse")
			}
		}
	}
	if n := b.Depositions(); n != 0 {
		t.Fatalf("a slow standby deposed a pulsing leader %d times", n)
	}
	if err := ta.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("leader's Verify: %v", err)
	}
	select {
	case r := <-bch:
		t.Fatalf("b won: %+v", r)
	default:
	}
}
