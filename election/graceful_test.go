package election

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A graceful stop: with WithTermContext, ending the Campaign context does
// not end the term. The lease stays renewed for longer than its TTL (it
// would have expired without renewals), nobody else wins meanwhile, and
// Resign then hands over within a campaign round.
func TestWithTermContextKeepsRenewingAfterStop(t *testing.T) {
	leakCheck(t)
	const ttl = 2 * time.Second
	cli := newClient(t, "")
	a := newElector(t, cli, testConfig(t, "bot", "a", ttl))
	b := newElector(t, newClient(t, ""), testConfig(t, "bot", "b", ttl))
	stop, stopNow := context.WithCancel(bg(t))
	ta := await(t, campaign(t, stop, a, WithTermContext(context.WithoutCancel(stop))), eventTimeout).term
	bch := campaign(t, bg(t), b)

	stopNow()
	stopped := time.Now()
	// A renewal sent a full TTL after the stop succeeded: the lease outlived
	// the moment it would have expired had the stop ended renewals.
	waitRenewedAfter(t, ta, stopped.Add(ttl))
	if err := ta.Err(); err != nil {
		t.Fatalf("term ended by the stop: %v", err)
	}
	if err := ta.Verify(rpcCtx(t)); err != nil {
		t.Fatalf("Verify during the graceful stop: %v", err)
	}
	ttlResp, err := cli.TimeToLive(rpcCtx(t), ta.Lease)
	if err != nil || ttlResp.TTL <= 0 {
		t.Fatalf("lease after %s of stop: ttl %+v err %v", time.Since(stopped), ttlResp, err)
	}
	select {
	case r := <-bch:
		t.Fatalf("b won during a's graceful stop: %+v", r)
	default:
	}

	resigned := time.Now()
	if err := ta.Resign(rpcCtx(t)); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(ta.Err(), ErrNotLeader) {
		t.Fatalf("Err after Resign = %v, want ErrNotLeader", ta.Err())
	}
	rb := await(t, bch, eventTimeout)
	if took := rb.at.Sub(resigned); took >= ttl {
		t.Fatalf("takeover took %s after Resign, want well under TTL %s", took, ttl)
	}
}

// Losing the lease during a graceful stop still ends the term at once: the
// watch and watchdog keep running after the Campaign context ends.
func TestWithTermContextStillEndsOnLoss(t *testing.T) {
	leakCheck(t)
	cli := newClient(t, "")
	e := newElector(t, cli, testConfig(t, "bot", "a", 10*time.Second))
	stop, stopNow := context.WithCancel(bg(t))
	term := await(t, campaign(t, stop, e, WithTermContext(context.WithoutCancel(stop))), eventTimeout).term
	stopNow()
	if _, err := cli.Delete(rpcCtx(t), term.Key); err != nil {
		t.Fatal(err)
	}
	waitDone(t, term, eventTimeout)
	if !errors.Is(term.Err(), ErrNotLeader) {
		t.Fatalf("Err = %v, want ErrNotLeader", term.Err())
	}
}

// The Campaign context still bounds the wait to win, with the option.
func TestWithTermContextCampaignCancel(t *testing.T) {
	leakCheck(t)
	ctx := bg(t)
	a := newElector(t, newClient(t, ""), testConfig(t, "bot", "a", 10*time.Second))
	b := newElector(t, newClient(t, ""), testConfig(t, "bot", "b", 10*time.Second))
	await(t, campaign(t, ctx, a), eventTimeout)
	stop, stopNow := context.WithCancel(ctx)
	bch := campaign(t, stop, b, WithTermContext(context.Background()))
	stopNow()
	select {
	case r := <-bch:
		if r.term != nil || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("Campaign after cancel = %+v, want context.Canceled", r)
		}
	case <-time.After(eventTimeout):
		t.Fatal("Campaign did not return after cancel")
	}
}
