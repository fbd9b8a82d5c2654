package wecom_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// Probe asks the server now, and its answer (or silence) is the truth:
// acked while the server answers, a timeout while its acks are stalled.
// Vitals record what the health monitor reads.
func TestProbeAndVitals(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	ch, h := msgChan(10)
	c := e.dial(e.config(), h)
	ctx := context.Background()
	if v := c.Vitals(); v.Connected.IsZero() || !v.LastCallback.IsZero() || !v.LastPingAck.IsZero() {
		t.Fatalf("fresh vitals: %+v", v)
	}
	if err := c.Probe(ctx, 0); err != nil {
		t.Fatalf("probe of a live server: %v", err)
	}
	e.post("alice", "q")
	r := recv(t, ch)
	if err := c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s", Content: "a"}); err != nil {
		t.Fatal(err)
	}
	v := c.Vitals()
	if v.LastPingAck.IsZero() || v.LastCallback.IsZero() || v.LastAckOK.IsZero() || v.FailedInARow != 0 {
		t.Fatalf("vitals after a probe, a callback and a reply: %+v", v)
	}

	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultStallAcks, Seconds: 60})
	if err := c.Probe(ctx, 200*time.Millisecond); !errors.Is(err, wecom.ErrAckTimeout) {
		t.Fatalf("probe while acks are stalled: %v, want ErrAckTimeout", err)
	}
	if err := c.SendMarkdown(ctx, "alice", 0, "x"); !errors.Is(err, wecom.ErrAckTimeout) {
		t.Fatalf("push while stalled: %v", err)
	}
	if v := c.Vitals(); v.FailedInARow != 1 || v.Unanswered != 1 || v.LastAckFail.IsZero() {
		t.Fatalf("vitals after a timed-out push: %+v", v)
	}

	c.CloseUnhealthy(errors.New("probe failed"))
	waitDone(t, c)
	if c.Reason() != wecom.ReasonUnhealthy {
		t.Fatalf("reason = %v, want unhealthy", c.Reason())
	}
	if err := c.Probe(ctx, 0); !errors.Is(err, wecom.ErrClosed) {
		t.Fatalf("probe after close: %v", err)
	}
}

// LastEvidence is the latest of the moments the connection worked; a
// failed frame is no evidence.
func TestVitalsLastEvidence(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.FixedZone("CST", 8*3600))
	v := wecom.Vitals{Connected: t0, LastPingAck: t0.Add(2 * time.Second), LastCallback: t0.Add(time.Second), LastAckFail: t0.Add(time.Minute)}
	if got := v.LastEvidence(); !got.Equal(t0.Add(2*time.Second)) || got.Location() != time.UTC {
		t.Errorf("LastEvidence = %v, want %v in UTC", got, t0.Add(2*time.Second).UTC())
	}
	v.LastAckOK = t0.Add(3 * time.Second)
	if got := v.LastEvidence(); !got.Equal(t0.Add(3 * time.Second)) {
		t.Errorf("LastEvidence = %v, want the ack at %v", got, t0.Add(3*time.Second))
	}
}

// AcksOverdue tells a stalled link from a working one: a frame waiting
// longer than d with no ack read meanwhile, or a timed-out frame with no
// ack since; an ack read again (a probe answered) clears it.
func TestAcksOverdue(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	ch, h := msgChan(10)
	cfg := e.config()
	// Long enough that a loaded machine's stall between the stalled
	// frame's write and the check "not overdue for a minute" below does
	// not reach it (the frame would then have timed out: overdue whatever d).
	cfg.AckTimeout = 5 * time.Second
	c := e.dial(cfg, h)
	ctx := context.Background()
	if c.AcksOverdue(0) {
		t.Fatal("a fresh connection owes nothing")
	}
	e.post("alice", "q")
	r := recv(t, ch)
	if err := c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s", Content: "a"}); err != nil {
		t.Fatal(err)
	}
	if c.AcksOverdue(0) {
		t.Fatal("overdue after an acked frame")
	}

	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultStallAcks, Seconds: 60})
	sent := make(chan error, 1)
	go func() { sent <- c.ReplyStream(ctx, r.reqID, wecom.Stream{ID: "s", Content: "ab"}) }()
	deadline := time.Now().Add(cfg.AckTimeout)
	for !c.AcksOverdue(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a frame unacked past d is not overdue")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c.AcksOverdue(time.Minute) {
		t.Fatal("overdue for a minute after a few hundred milliseconds")
	}
	if err := <-sent; !errors.Is(err, wecom.ErrAckTimeout) {
		t.Fatalf("frame sent while stalled: %v, want ErrAckTimeout", err)
	}
	if !c.AcksOverdue(time.Minute) {
		t.Fatal("a timed-out frame with nothing acked since is overdue, whatever d")
	}

	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultClear})
	if err := c.Probe(ctx, 0); err != nil {
		t.Fatalf("probe after the stall: %v", err)
	}
	if c.AcksOverdue(0) {
		t.Fatal("still overdue after an ack was read")
	}
}

// PingLate is a heartbeat waiting past AckTimeout with no ping acked
// since: the idle link's first sign, raised before the connection's own
// MaxMissedPings gives up; a probe answered clears it.
func TestPingLate(t *testing.T) {
	e := newEnv(t, wecomsim.Config{})
	_, h := msgChan(10)
	cfg := e.config()
	cfg.HeartbeatInterval, cfg.AckTimeout, cfg.MaxMissedPings = 300*time.Millisecond, 200*time.Millisecond, 1000
	c := e.dial(cfg, h)
	waitFor := func(what string, cond func(wecom.Vitals) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond(c.Vitals()) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %+v", what, c.Vitals())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("a heartbeat acked", func(v wecom.Vitals) bool {
		return v.LastPingAck.After(v.LastPing) && !v.LastPing.IsZero() && !v.PingLate
	})
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultStallAcks, Seconds: 60})
	waitFor("a late heartbeat", func(v wecom.Vitals) bool { return v.PingLate })
	if v := c.Vitals(); time.Since(v.LastPing) <= cfg.AckTimeout || v.LastPingAck.After(v.LastPing) {
		t.Fatalf("late too soon, or with its ack read: %+v", v)
	}
	if c.Reason() != wecom.ReasonNone {
		t.Fatalf("closed (%v): the connection's own limit is far off", c.Reason())
	}
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultClear})
	if err := c.Probe(context.Background(), 0); err != nil {
		t.Fatalf("probe after the stall: %v", err)
	}
	waitFor("no late heartbeat once acks flow", func(v wecom.Vitals) bool { return !v.PingLate })
}
