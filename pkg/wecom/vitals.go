package wecom

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/botctl/botctl/pkg/clock"
)

// Vitals are a connection's signs of life, for the health monitor: when it
// last heard from the server, and how its frames fared. Zero times are
// "never on this connection".
type Vitals struct {
	Connected    time.Time // subscribed
	LastCallback time.Time // a callback was read
	Callbacks    int64     // callbacks read on this connection
	LastPingAck  time.Time // a heartbeat or probe was acked with errcode 0
	LastPing     time.Time // a heartbeat ping was written (probes are not counted)
	// PingLate: the last heartbeat ping has waited longer than AckTimeout
	// and no ping (heartbeat or probe) was acked since. On an idle bot
	// this is the first sign of a dead link, one heartbeat interval at
	// most after it died; the connection itself waits for MaxMissedPings.
	PingLate    bool
	LastAckOK   time.Time // a frame was acked with errcode 0
	AckedOK     int64     // frames acked with errcode 0 on this connection
	LastAckFail time.Time // a frame was refused, timed out, or got an ack of unknown owner
	// FailedInARow counts frames refused, timed out or of unknown outcome
	// since the last frame acked with errcode 0.
	FailedInARow int64
	// Unanswered counts frames that timed out or whose ack may have been
	// an earlier frame's (late acks), over the connection's life.
	Unanswered int64
	// RateLimited counts frames refused with errcode 45009 (WeCom's
	// quota) over the connection's life.
	RateLimited int64
}

// LastEvidence is the latest moment the connection was known to work:
// subscribed, a callback read, or a frame acked with errcode 0 (UTC).
func (v Vitals) LastEvidence() time.Time {
	t := v.Connected
	for _, u := range []time.Time{v.LastCallback, v.LastPingAck, v.LastAckOK} {
		if u.After(t) {
			t = u
		}
	}
	return t.UTC()
}

type vitals struct {
	connected, callback, pingAck, ackOK, ackFail atomic.Int64 // unix ns
	pingSent                                     atomic.Int64 // unix ns
	inARow, unanswered, callbacks, okCount       atomic.Int64
	rateLimited                                  atomic.Int64
}

func (v *vitals) ok() {
	v.ackOK.Store(time.Now().UnixNano())
	v.okCount.Add(1)
	v.inARow.Store(0)
}

func (v *vitals) failed(unanswered bool) {
	v.ackFail.Store(time.Now().UnixNano())
	v.inARow.Add(1)
	if unanswered {
		v.unanswered.Add(1)
	}
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Vitals returns the connection's signs of life now.
func (c *Conn) Vitals() Vitals {
	v := &c.vitals
	out := Vitals{
		Connected: unixTime(v.connected.Load()), LastCallback: unixTime(v.callback.Load()), Callbacks: v.callbacks.Load(),
		LastPingAck: unixTime(v.pingAck.Load()), LastPing: unixTime(v.pingSent.Load()), LastAckOK: unixTime(v.ackOK.Load()), AckedOK: v.okCount.Load(),
		LastAckFail: unixTime(v.ackFail.Load()), FailedInARow: v.inARow.Load(), Unanswered: v.unanswered.Load(),
		RateLimited: v.rateLimited.Load(),
	}
	out.PingLate = !out.LastPing.IsZero() && !out.LastPingAck.After(out.LastPing) && time.Since(out.LastPing) > c.cfg.AckTimeout
	return out
}

// AcksOverdue reports whether the server owes this connection an ack for
// longer than d: a frame has waited d while no ack of any frame (nor of a
// heartbeat) was read, or a frame's ack timed out and no ack has been read
// since. A stalled link looks like this; a busy healthy one does not (its
// acks keep coming). A frame sent now would have an unknown outcome: a
// sender that must not duplicate (the pusher's final frames) waits until
// an ack is read again, or the connection is replaced.
func (c *Conn) AcksOverdue(d time.Duration) bool { return c.acks.overdue(d) }

// Probe sends one heartbeat now and waits for its ack, at most timeout (0:
// the AckTimeout): the health monitor's question "is anyone there?", asked
// when a signal looks wrong instead of pinging every bot more often. nil:
// the server answered errcode 0. A ping answered 846609 also closes the
// connection (ReasonNotSubscribed), as any ping does.
func (c *Conn) Probe(ctx context.Context, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = c.cfg.AckTimeout
	}
	id := NewReqID(CmdPing)
	raw, err := encodeFrame(CmdPing, id, nil)
	if err != nil {
		return err
	}
	w := c.acks.probe(id)
	defer c.acks.unprobe(id)
	if err := c.write(raw); err != nil {
		return err
	}
	t := clock.Or(c.cfg.Clock).NewTimer(timeout)
	defer t.Stop()
	select {
	case f := <-w:
		if f.ErrCode != ErrCodeOK {
			return &AckError{Cmd: CmdPing, ReqID: id, ErrCode: f.ErrCode, ErrMsg: f.ErrMsg}
		}
		return nil
	case <-t.C():
		return fmt.Errorf("%w: probe ping (req_id %s) not acked within %s", ErrAckTimeout, id, timeout)
	case <-ctx.Done():
		return ctx.Err()
	case <-c.end.closing:
		return c.closeErr()
	}
}
