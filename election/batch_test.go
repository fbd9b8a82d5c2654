package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
	"github.com/botctl/botctl/internal/testwait"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// runBatch starts node's Batch under cfg's prefixes and gives it to cfg.
func runBatch(t *testing.T, cli *clientv3.Client, cfg *Config) *Batch {
	t.Helper()
	b, err := NewBatch(cli, BatchConfig{NodeID: cfg.NodeID, NodePulsePrefix: cfg.NodePulsePrefix, PulseInterval: cfg.PulseInterval, Logger: cfg.Logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	cfg.Batch = b
	return b
}

// holdBatch stops b's writes (a node whose process hangs stops them all).
func holdBatch(b *Batch) (resume func()) {
	ch := make(chan struct{})
	b.hold.Store(&ch)
	var once sync.Once
	return func() {
		once.Do(func() {
			b.hold.Store(nil)
			close(ch)
		})
	}
}

// watchKey reports every put of key from now on, with the time it was
// seen.
func watchKey(t *testing.T, cli *clientv3.Client, key string) <-chan time.Time {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out := make(chan time.Time, 1024)
	wch := cli.Watch(ctx, key)
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

// hangAndDepose: a leads, b waits; hang() stops a (its term's loop, or its
// whole node); b must depose a within about PulseTimeout, a's term must
// end and its Verify refuse. It returns how long the takeover took.
func hangAndDepose(t *testing.T, a, b *Elector, hang func() (resume func())) time.Duration {
	t.Helper()
	ctx := bg(t)
	admin := newClient(t, "")
	ta := await(t, campaign(t, ctx, a), eventTimeout).term
	bch := campaign(t, ctx, b)
	waitCandidates(t, admin, b.Name(), 2)
	time.Sleep(a.cfg.PulseInterval * 2) // b has seen the pulse move
	hung := time.Now()
	resume := hang()
	defer resume()
	rb := await(t, bch, eventTimeout)
	took := rb.at.Sub(hung)
	// The live leader was not deposed: b won only once a hung. That b
	// waits out PulseTimeout from the last move it saw is the stall
	// decision's (TestStallDecision, on a fake clock): measured here from
	// the test's hang, it would also count the last pulse's write
	// latency, which the machine's load sets.
	if took <= 0 {
		t.Fatalf("b won %s before a hung: a live leader deposed", -took)
	}
	if took >= a.cfg.TTL/2 {
		t.Fatalf("b won %s after the hang, want about PulseTimeout %s, well under the TTL %s", took, b.cfg.PulseTimeout, a.cfg.TTL)
	}
	for deadline := time.Now().Add(eventTimeout); b.Depositions() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("b's depositions = %d, want 1", b.Depositions())
		}
	}
	resume()
	waitDone(t, ta, eventTimeout)
	if !errors.Is(ta.Err(), ErrNotLeader) {
		t.Fatalf("deposed term ended with %v, want ErrNotLeader", ta.Err())
	}
	if err := ta.Verify(rpcCtx(t)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("deposed leader's Verify = %v, want ErrNotLeader", err)
	}
	if err := rb.term.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("new leader's Verify: %v", err)
	}
	t.Logf("hung leader replaced after %s (PulseTimeout %s); deposed term: %v", took, b.cfg.PulseTimeout, ta.Err())
	return took
}

// One bot's term hangs while its node goes on writing its pulse record
// (other terms keep it moving): its counter stands still, and the standby
// deposes it within about PulseTimeout, though the record kept moving.
func TestBatchedHungTermIsDeposed(t *testing.T) {
	leakCheck(t)
	const ttl = 20 * time.Second
	cfgA, cfgB := testConfig(t, "bot", "a", ttl), testConfig(t, "bot", "b", ttl)
	ba := runBatch(t, newClient(t, ""), &cfgA)
	runBatch(t, newClient(t, ""), &cfgB)
	a, b := newElector(t, newClient(t, ""), cfgA), newElector(t, newClient(t, ""), cfgB)
	// A second bot led by a keeps a's record busy with a live term.
	cfgA2 := cfgA
	cfgA2.BotID = "other"
	await(t, campaign(t, bg(t), newElector(t, newClient(t, ""), cfgA2)), eventTimeout)
	records := watchKey(t, newClient(t, ""), ba.Key())
	hangAndDepose(t, a, b, func() func() {
		for len(records) > 0 {
			<-records
		}
		return holdPulses(a)
	})
	if n := len(records); n < 2 {
		t.Fatalf("node a's record was written %d times while its term hung, want it to keep moving", n)
	}
	if info, err := Leader(rpcCtx(t), newClient(t, ""), cfgB.Prefix, "bot"); err != nil || !info.NodePulse || info.Node != "b" {
		t.Fatalf("Leader = %+v (%v), want b advertising a node pulse", info, err)
	}
}

// A whole node hangs (its record stops): the standby deposes its leader.
func TestBatchedHungNodeIsDeposed(t *testing.T) {
	leakCheck(t)
	const ttl = 20 * time.Second
	cfgA, cfgB := testConfig(t, "bot", "a", ttl), testConfig(t, "bot", "b", ttl)
	ba := runBatch(t, newClient(t, ""), &cfgA)
	runBatch(t, newClient(t, ""), &cfgB)
	a, b := newElector(t, newClient(t, ""), cfgA), newElector(t, newClient(t, ""), cfgB)
	hangAndDepose(t, a, b, func() func() {
		r1, r2 := holdBatch(ba), holdPulses(a)
		return func() { r1(); r2() }
	})
}

// Mixed versions. A leader of the per-bot pulse (botctl 0.5.0's kind) is
// deposed by a standby that has a Batch; a leader with a Batch is deposed
// by a standby without one (it reads the leader's node record itself).
func TestMixedPulsesDepose(t *testing.T) {
	leakCheck(t)
	const ttl = 20 * time.Second
	t.Run("per-bot leader, batched standby", func(t *testing.T) {
		cfgA, cfgB := testConfig(t, "bot", "a", ttl), testConfig(t, "bot", "b", ttl)
		runBatch(t, newClient(t, ""), &cfgB)
		a, b := newElector(t, newClient(t, ""), cfgA), newElector(t, newClient(t, ""), cfgB)
		hangAndDepose(t, a, b, func() func() { return holdPulses(a) })
	})
	t.Run("batched leader, standby without a batch", func(t *testing.T) {
		cfgA, cfgB := testConfig(t, "bot", "a", ttl), testConfig(t, "bot", "b", ttl)
		ba := runBatch(t, newClient(t, ""), &cfgA)
		a, b := newElector(t, newClient(t, ""), cfgA), newElector(t, newClient(t, ""), cfgB)
		hangAndDepose(t, a, b, func() func() {
			r1, r2 := holdBatch(ba), holdPulses(a)
			return func() { r1(); r2() }
		})
	})
}

// A standby of botctl 0.5.0 deposes only a leader whose value advertises
// "pulse_ms" (it then watches the per-bot pulse key). A leader with a
// Batch writes no per-bot pulse, so it must not advertise one: its value
// says "node_pulse_ms" instead, and 0.5.0's reading of it finds no pulse.
func TestBatchedLeaderAdvertisesNoPerBotPulse(t *testing.T) {
	leakCheck(t)
	admin := newClient(t, "")
	cfg := testConfig(t, "bot", "a", 20*time.Second)
	runBatch(t, newClient(t, ""), &cfg)
	a := newElector(t, newClient(t, ""), cfg)
	await(t, campaign(t, bg(t), a), eventTimeout)
	resp, err := admin.Get(rpcCtx(t), a.Name()+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("leader key: %+v (%v)", resp, err)
	}
	var old struct { // 0.5.0's election value
		Node    string `json:"node"`
		PulseMS int64  `json:"pulse_ms,omitempty"`
	}
	var now value
	if err := json.Unmarshal(resp.Kvs[0].Value, &old); err != nil || json.Unmarshal(resp.Kvs[0].Value, &now) != nil {
		t.Fatalf("leader value %s: %v", resp.Kvs[0].Value, err)
	}
	if old.PulseMS != 0 || old.Node != "a" || now.NodePulseMS != cfg.withDefaults().PulseTimeout.Milliseconds() {
		t.Fatalf("leader value %s: 0.5.0 reads pulse_ms %d (want 0), node_pulse_ms %d", resp.Kvs[0].Value, old.PulseMS, now.NodePulseMS)
	}
	if p, err := admin.Get(rpcCtx(t), cfg.PulsePrefix+"bot"); err != nil || len(p.Kvs) != 0 {
		t.Fatalf("per-bot pulse key of a batched leader: %+v (%v), want none", p, err)
	}
}

// A batched leader that pauses for 1s at a time, term and node together
// (a GC pause), is never deposed.
func TestBatchedPausingLeaderIsNotDeposed(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	admin := newClient(t, "")
	const ttl = 20 * time.Second
	cfgA, cfgB := testConfig(t, "bot", "a", ttl), testConfig(t, "bot", "b", ttl)
	ba := runBatch(t, newClient(t, ""), &cfgA)
	runBatch(t, newClient(t, ""), &cfgB)
	a, b := newElector(t, newClient(t, ""), cfgA), newElector(t, newClient(t, ""), cfgB)
	ta := await(t, campaign(t, ctx, a), eventTimeout).term
	records := watchKey(t, admin, ba.Key())
	bch := campaign(t, ctx, b)
	waitCandidates(t, admin, b.Name(), 2)
	for i := range 6 {
		select {
		case <-records:
		case <-time.After(eventTimeout):
			t.Fatalf("pause %d: no record written", i)
		}
		r1, r2 := holdBatch(ba), holdPulses(a)
		time.Sleep(time.Second) // the pause itself is what is tested
		r1()
		r2()
	}
	time.Sleep(b.cfg.PulseTimeout)
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

// The cost: a node leading many bots writes one record per PulseInterval,
// not one pulse per bot; each term is in it.
func TestBatchWriteCost(t *testing.T) {
	leakCheck(t)
	admin := newClient(t, "")
	cfg := testConfig(t, "bot", "n1", 20*time.Second)
	b := runBatch(t, newClient(t, ""), &cfg)
	cli := newClient(t, "")
	const bots = 30
	for i := range bots {
		c := cfg
		c.BotID = fmt.Sprintf("bot-%03d", i)
		await(t, campaign(t, bg(t), newElector(t, cli, c)), eventTimeout)
	}
	records := watchKey(t, admin, b.Key())
	<-records
	began := time.Now()
	const window = 5 * time.Second
	n := 0
	for time.Since(began) < window {
		select {
		case <-records:
			n++
		case <-time.After(eventTimeout):
			t.Fatal("no record written")
		}
	}
	elapsed := time.Since(began)
	resp, err := admin.Get(rpcCtx(t), b.Key())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("record: %+v (%v)", resp, err)
	}
	var rec nodeRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil || len(rec.Terms) != bots {
		t.Fatalf("record %s: %v, want %d terms", resp.Kvs[0].Value, err, bots)
	}
	pulses, err := admin.Get(rpcCtx(t), cfg.PulsePrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || pulses.Count != 0 {
		t.Fatalf("per-bot pulse keys: %v (%v), want none", pulses.Count, err)
	}
	want := elapsed.Seconds() / cfg.withDefaults().PulseInterval.Seconds()
	t.Logf("%d bots led: %d record writes in %s (%.2f/s), record %d bytes", bots, n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), len(resp.Kvs[0].Value))
	if float64(n) > want+2 || float64(n) < want/2 {
		t.Fatalf("%d record writes in %s, want about %.0f", n, elapsed.Round(time.Millisecond), want)
	}
}

// A node's process paused (a tick arriving late) waits one counter step
// before copying the counters, so its terms' loops, woken with it,
// advance first: the record written after the pause shows them moving.
// On time, the record is written at the tick.
func TestBatchWaitsAStepAfterALateTick(t *testing.T) {
	leakCheck(t)
	cli := newClient(t, "")
	c := fakeclock.New(time.Now())
	cfg := testConfig(t, "bot", "n1", 20*time.Second)
	b, err := NewBatch(cli, BatchConfig{NodeID: "n1", NodePulsePrefix: cfg.NodePulsePrefix, PulseInterval: time.Second, Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	c.BlockUntil(1) // the ticker
	term := b.add("bot", 7)
	wctx, wcancel := context.WithCancel(context.Background())
	t.Cleanup(wcancel)
	wch := cli.Watch(wctx, b.Key())
	next := func() int64 {
		t.Helper()
		select {
		case wr := <-wch:
			ev := wr.Events[len(wr.Events)-1]
			return parseRecord(0, ev.Kv.Value, ev.Kv.ModRevision, "bot", 7).N
		case <-time.After(eventTimeout):
			t.Fatal("no record written")
			return 0
		}
	}
	c.Step(time.Second) // on time: written at once
	if n := next(); n != 1 {
		t.Fatalf("record on time: counter %d, want 1", n)
	}
	// The write has returned (its hedge's timer is gone): only the
	// ticker waits.
	testwait.Eventually(t, eventTimeout, "the write's end", func() bool { return c.Waiters() == 1 })
	c.Step(3 * time.Second) // late: the process was paused
	c.BlockUntil(2)         // the ticker and the step's wait
	term.n.Add(1)           // the term's loop, woken with the node
	c.Step(time.Second / 4)
	if n := next(); n != 2 {
		t.Fatalf("record after a pause: counter %d, want 2 (the term's advance after the pause)", n)
	}
}
