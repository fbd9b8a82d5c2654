package node_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/wecom"
)

// The test cluster's election TTL (see cluster.start).
const testTTL = 3 * time.Second

// graceHooks blocks WorkOnConn (after its context ends) and Drain until
// released, and reports when each is reached.
type graceHooks struct {
	leadingStopped chan *wecom.Conn
	releaseLeading chan struct{}
	drainStarted   chan *election.Term
	releaseDrain   chan struct{}
	onceLeading    sync.Once
	onceDrain      sync.Once
}

func newGraceHooks() *graceHooks {
	return &graceHooks{
		leadingStopped: make(chan *wecom.Conn, 1),
		releaseLeading: make(chan struct{}),
		drainStarted:   make(chan *election.Term, 1),
		releaseDrain:   make(chan struct{}),
	}
}

func (h *graceHooks) letLeadingReturn() { h.onceLeading.Do(func() { close(h.releaseLeading) }) }
func (h *graceHooks) letDrainReturn()   { h.onceDrain.Do(func() { close(h.releaseDrain) }) }

// unblockAtCleanup releases both hooks when t ends, so that a failed test
// does not leave its node stuck; call it after starting the node (cleanups
// run last-registered first).
func (h *graceHooks) unblockAtCleanup(t *testing.T) {
	t.Cleanup(func() { h.letLeadingReturn(); h.letDrainReturn() })
}

// WorkOnConn waits for its context to end, reports it, and returns when
// released. Once released it need not report: a report nobody receives
// (a second WorkOnConn, the report channel full) would block the node for
// good and hang the test's cleanup.
func (h *graceHooks) WorkOnConn(ctx context.Context, _ *election.Term, conn *wecom.Conn) {
	<-ctx.Done()
	select {
	case h.leadingStopped <- conn:
	case <-h.releaseLeading:
	}
	<-h.releaseLeading
}

// Drain reports it started and returns when released (or at its deadline),
// reported or not (as WorkOnConn).
func (h *graceHooks) Drain(ctx context.Context, term *election.Term) {
	select {
	case h.drainStarted <- term:
	case <-h.releaseDrain:
	case <-ctx.Done():
	}
	select {
	case <-h.releaseDrain:
	case <-ctx.Done():
	}
}

func (h *graceHooks) edit(cfg *node.Config) {
	cfg.Hooks = h
	cfg.DrainTimeout = waitLong
}

func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLong):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// pastTTL waits until a full TTL (plus a renewal's slack) has passed since
// from: had renewals stopped at from, the lease would have expired by then.
// Time passing is the point here, not letting things settle.
func pastTTL(from time.Time) { time.Sleep(time.Until(from.Add(testTTL + time.Second))) }

// heldBy fails t unless node id still holds bot's election in term info.
func (c *cluster) heldBy(t *testing.T, bot, id string, want election.LeaderInfo, when string) {
	t.Helper()
	info, err := election.Leader(context.Background(), c.admin, "", bot)
	if err != nil || info.Node != id || info.Rev != want.Rev || info.Lease != want.Lease {
		t.Fatalf("%s: leader %+v (%v), want %s's term %d", when, info, err, id, want.Rev)
	}
	ttl, err := c.admin.TimeToLive(context.Background(), want.Lease)
	if err != nil || ttl.TTL <= 0 {
		t.Fatalf("%s: lease %+v (%v), want it alive", when, ttl, err)
	}
}

// SIGTERM on the leader: the pusher (WorkOnConn) drains on the still-open
// connection, then the connection is closed, then inbound handlers drain
// (Drain), and all that while the lease is renewed, each stretch longer than
// the TTL. Only then is the term resigned, and the standby takes over within
// a campaign round, with no kick.
func TestGracefulStopRenewsUntilDrainedThenResigns(t *testing.T) {
	c := newCluster(t, "b1")
	h := newGraceHooks()
	a := c.startWith("a", "default", c.etcd.Endpoints(), c.bots, h.edit)
	h.unblockAtCleanup(t)
	c.leaderOf("b1", a)
	held, err := election.Leader(context.Background(), c.admin, "", "b1")
	if err != nil {
		t.Fatal(err)
	}
	b := c.start("b", "default", c.etcd.Endpoints(), c.bots)

	stopped := time.Now()
	a.stop() // the node's context ends, as on SIGTERM
	conn := receive(t, "WorkOnConn's context to end", h.leadingStopped)
	pastTTL(stopped)
	select {
	case <-conn.Done():
		t.Fatal("the connection was closed before WorkOnConn returned")
	default:
	}
	if !c.stats("b1").Connected {
		t.Fatal("the simulator lost the connection while WorkOnConn drained")
	}
	c.heldBy(t, "b1", "a", held, "while WorkOnConn drains")
	if st := state(b, "b1"); st == node.StateLeader {
		t.Fatalf("b leads while a still holds its connection")
	}

	h.letLeadingReturn()
	term := receive(t, "Drain to start", h.drainStarted)
	drainStarted := time.Now()
	select {
	case <-conn.Done():
	default:
		t.Fatal("Drain called while the connection is still open")
	}
	if err := term.Err(); err != nil {
		t.Fatalf("term ended before Drain: %v", err)
	}
	pastTTL(drainStarted)
	if err := term.Err(); err != nil {
		t.Fatalf("term ended during Drain: %v", err)
	}
	c.heldBy(t, "b1", "a", held, "while Drain runs")
	if st := state(a, "b1"); st != node.StateDraining {
		t.Fatalf("a's state during Drain = %s, want %s", st, node.StateDraining)
	}

	released := time.Now()
	h.letDrainReturn()
	c.leaderOf("b1", b)
	if d := time.Since(released); d > testTTL {
		t.Fatalf("takeover took %s after the drain, the TTL: did a resign?", d)
	}
	if term.Err() == nil {
		t.Fatal("a's term still live after b took over")
	}
	select {
	case <-a.done:
	case <-time.After(waitLong):
		t.Fatal("node a did not stop")
	}
	if k := c.stats("b1").Kicks; k != 0 {
		t.Fatalf("%d kicks: a's connection overlapped b's", k)
	}
}

// Losing the term during a graceful stop (here: an operator deletes the
// election key while WorkOnConn is still draining) closes the connection at
// once, without waiting for WorkOnConn: no lock, no identity.
func TestLostTermDuringGracefulStopClosesAtOnce(t *testing.T) {
	c := newCluster(t, "b1")
	h := newGraceHooks()
	a := c.startWith("a", "default", c.etcd.Endpoints(), c.bots, h.edit)
	h.unblockAtCleanup(t)
	c.leaderOf("b1", a)
	a.stop()
	conn := receive(t, "WorkOnConn's context to end", h.leadingStopped)
	info, err := election.Leader(context.Background(), c.admin, "", "b1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.admin.Delete(context.Background(), info.Key); err != nil {
		t.Fatal(err)
	}
	receive(t, "the connection to close", conn.Done())
	if conn.Reason() != wecom.ReasonClosedByUs {
		t.Fatalf("connection ended by %s, want closed by us", conn.Reason())
	}
	h.letLeadingReturn()
	term := receive(t, "Drain to start", h.drainStarted)
	if term.Err() == nil {
		t.Fatal("Drain after a lost term, but the term is live")
	}
	h.letDrainReturn()
	receive(t, "node a to stop", a.done)
}
