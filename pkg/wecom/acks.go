package wecom

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botctl/botctl/pkg/clock"
)

// acks is what the connection is owed: per req_id, the turn (frames of one
// req_id go one at a time, each after the previous one's ack or timeout)
// and the frames whose ack has not come; the probes' pings awaiting theirs;
// and the ack flow AcksOverdue reads.
type acks struct {
	mu     sync.Mutex
	reqs   map[string]*reqState   // req_id → its frames' state
	probes map[string]chan *Frame // Probe's pings awaiting their ack
	// Frames waiting for their ack now, and since when some have (mu).
	inflight      int
	inflightSince time.Time
	lastAck       atomic.Int64 // the last ack of any frame read (unix ns)
	lastTimeout   atomic.Int64 // the last ack timeout (unix ns)
	timeouts      atomic.Int32 // frames in a row whose ack timed out
}

func newAcks() *acks {
	return &acks{reqs: make(map[string]*reqState), probes: make(map[string]chan *Frame)}
}

// reqState is what the connection knows about one req_id's frames. Guarded
// by acks.mu; dropped when no caller holds it and no ack is owed.
type reqState struct {
	turn chan struct{} // one frame of the req_id at a time
	refs int           // callers holding or waiting for the turn
	// unacked counts frames sent whose ack has not arrived: after a
	// timeout it stays above zero until the late ack comes, and while it
	// does an ack cannot be told apart from an earlier frame's.
	unacked int
	waiter  chan acked // the frame in flight, nil if none
}

// acked is an ack and when the reader read it.
type acked struct {
	f  *Frame
	at time.Time
}

// forgetLocked drops a req_id's state once nobody holds it and no ack is
// owed. Call with mu held.
func (a *acks) forgetLocked(id string, st *reqState) {
	if st.refs == 0 && st.unacked == 0 && a.reqs[id] == st {
		delete(a.reqs, id)
	}
}

// hold registers a caller of reqID's turn (held or waited for).
func (a *acks) hold(reqID string) *reqState {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.reqs[reqID]
	if st == nil {
		st = &reqState{turn: make(chan struct{}, 1)}
		a.reqs[reqID] = st
	}
	st.refs++
	return st
}

// unhold withdraws a caller registered by hold.
func (a *acks) unhold(reqID string, st *reqState) {
	a.mu.Lock()
	st.refs--
	a.forgetLocked(reqID, st)
	a.mu.Unlock()
}

// release gives back reqID's turn, taken by Conn.acquire.
func (a *acks) release(reqID string, st *reqState) {
	<-st.turn
	a.unhold(reqID, st)
}

// sending records a frame about to be written on st, whose ack w awaits.
// It reports whether the ack will be ambiguous: an ack owed to an earlier
// frame would be indistinguishable from this frame's. Decided before
// sending, so no ack can race the decision.
func (a *acks) sending(st *reqState, w chan acked) (ambiguous bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ambiguous = st.unacked > 0
	st.unacked++
	st.waiter = w
	if a.inflight == 0 {
		a.inflightSince = time.Now()
	}
	a.inflight++
	return ambiguous
}

// withdraw removes w as st's waiter, if the ack has not taken it.
func (a *acks) withdraw(st *reqState, w chan acked) {
	a.mu.Lock()
	if st.waiter == w {
		st.waiter = nil
		a.inflight--
	}
	a.mu.Unlock()
}

// received settles one owed ack of req_id id: it returns the waiting
// frame's channel (nil when the frame had timed out: a late ack), and
// false when no ack was owed on id.
func (a *acks) received(id string) (w chan acked, owed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.reqs[id]
	if st == nil || st.unacked == 0 {
		return nil, false
	}
	st.unacked--
	w = st.waiter
	st.waiter = nil
	if w != nil {
		a.inflight--
	}
	a.forgetLocked(id, st)
	return w, true
}

// probe registers a probe's ping id; its ack is sent on the channel.
func (a *acks) probe(id string) chan *Frame {
	w := make(chan *Frame, 1)
	a.mu.Lock()
	a.probes[id] = w
	a.mu.Unlock()
	return w
}

// unprobe forgets a probe's ping id.
func (a *acks) unprobe(id string) {
	a.mu.Lock()
	delete(a.probes, id)
	a.mu.Unlock()
}

// probeAcked hands a ping's ack to the probe waiting for it, if any.
func (a *acks) probeAcked(f *Frame) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w := a.probes[f.Headers.ReqID]; w != nil {
		delete(a.probes, f.Headers.ReqID)
		w <- f // buffered, one slot
	}
}

// overdue is AcksOverdue.
func (a *acks) overdue(d time.Duration) bool {
	last := unixTime(a.lastAck.Load())
	if t := unixTime(a.lastTimeout.Load()); t.After(last) {
		return true
	}
	a.mu.Lock()
	n, since := a.inflight, a.inflightSince
	a.mu.Unlock()
	if n == 0 {
		return false
	}
	if last.After(since) {
		since = last
	}
	return time.Since(since) > d
}

// ack handles an ack read from the socket, on the reader.
func (c *Conn) ack(f *Frame) {
	c.acks.lastAck.Store(time.Now().UnixNano())
	id := f.Headers.ReqID
	if strings.HasPrefix(id, CmdPing+"_") {
		c.acks.probeAcked(f)
		if c.cfg.Frames != nil {
			c.cfg.Frames.FrameOut(c.cfg.BotID, CmdPing, f.ErrCode) // pings are counted when acked
		}
		switch f.ErrCode {
		case ErrCodeOK:
			c.missed.Store(0)
			c.vitals.pingAck.Store(time.Now().UnixNano())
		case ErrCodeNotSubscribed:
			c.shut(ReasonNotSubscribed, fmt.Errorf("ping answered errcode %d: %s", f.ErrCode, f.ErrMsg))
		default:
			c.log.Warn().Int("errcode", f.ErrCode).Str("errmsg", f.ErrMsg).Msg("heartbeat refused")
		}
		return
	}
	w, owed := c.acks.received(id)
	if !owed {
		c.log.Warn().Str("req_id", id).Int("errcode", f.ErrCode).Msg("ack for no frame sent on this req_id; ignored")
		return
	}
	c.acks.timeouts.Store(0)
	if w != nil {
		w <- acked{f, time.Now()} // buffered, one slot
	} else {
		c.log.Info().Str("req_id", id).Int("errcode", f.ErrCode).Str("errmsg", f.ErrMsg).
			Msg("late ack of a frame that timed out; its outcome stays unknown to the caller")
	}
	if f.ErrCode == ErrCodeNotSubscribed {
		c.shut(ReasonNotSubscribed, fmt.Errorf("frame on req_id %s answered errcode %d: %s", id, f.ErrCode, f.ErrMsg))
	}
}

// acquire waits for the req_id's turn: frames of one req_id go one at a
// time, each after the previous one's ack or timeout. The turn is given
// back with acks.release.
func (c *Conn) acquire(ctx context.Context, reqID string) (*reqState, error) {
	st := c.acks.hold(reqID)
	select {
	case st.turn <- struct{}{}:
		return st, nil
	case <-ctx.Done():
		c.acks.unhold(reqID, st)
		return nil, ctx.Err()
	case <-c.end.closing:
		c.acks.unhold(reqID, st)
		return nil, c.closeErr()
	}
}

// Do sends one frame and waits for its ack: the generic form behind every
// send method. The outcomes:
//   - nil: the server accepted this frame (errcode 0);
//   - an *AckError: the server refused this frame with that errcode;
//   - ErrAckTimeout (which also satisfies ErrAckUnknown): no ack within
//     AckTimeout; the frame may or may not have been applied;
//   - ErrAckUnknown: an ack came, but an earlier frame of the same req_id
//     had timed out and its ack was still owed, so this ack may be that
//     frame's: this frame's outcome is unknown (see the package doc);
//   - ctx's error: the caller gave up; a frame already written may or may
//     not have been applied;
//   - a *CloseError (ErrClosed): the connection ended first;
//   - ErrInvalidFrame, ErrFrameTooLarge…: refused locally, nothing sent.
//
// An ack with errcode 846609 (not subscribed) also closes the connection
// (ReasonNotSubscribed), and MaxAckTimeouts timeouts in a row close it
// (ReasonAckTimeouts). IsConnectionError tells the outcomes about the
// connection from those about this frame.
func (c *Conn) Do(ctx context.Context, cmd, reqID string, body any) (*Frame, error) {
	p, err := c.Send(ctx, cmd, reqID, body)
	if err != nil {
		return nil, err
	}
	return p.Wait(ctx)
}

// Pending is a frame written and waiting for its ack: Send's result.
// Wait must be called (once is enough; later calls return the same
// outcome): until then the frame holds its req_id's turn, and the next
// frame of that req_id waits.
type Pending struct {
	c          *Conn
	cmd, reqID string
	st         *reqState
	w          chan acked
	written    time.Time
	ackedAt    time.Time
	ambiguous  bool
	once       sync.Once
	f          *Frame
	err        error
}

// Send writes one frame and returns without waiting for its ack: Do's
// first half, for a caller that has something else to do meanwhile (the
// inbound path writes a receipt in the connection's callback order and
// waits for its ack in the handler). ctx bounds the wait for the req_id's
// turn; an error means nothing was sent (Wait is not called then). The
// outcomes of Wait are Do's.
func (c *Conn) Send(ctx context.Context, cmd, reqID string, body any) (p *Pending, err error) {
	if reqID == "" {
		err = fmt.Errorf("%w: %s without req_id", ErrInvalidFrame, cmd)
	}
	var raw []byte
	if err == nil {
		raw, err = encodeFrame(cmd, reqID, body)
	}
	var st *reqState
	if err == nil {
		st, err = c.acquire(ctx, reqID)
	}
	if err != nil {
		if c.cfg.Frames != nil {
			c.cfg.Frames.FrameOut(c.cfg.BotID, cmd, outcomeCode(nil, err))
		}
		return nil, err
	}
	p = &Pending{c: c, cmd: cmd, reqID: reqID, st: st, w: make(chan acked, 1)}
	p.ambiguous = c.acks.sending(st, p.w)
	p.written = time.Now()
	if err := c.write(raw); err != nil {
		p.stopWaiting()
		p.once.Do(func() { p.finish(nil, err) })
		return nil, err
	}
	return p, nil
}

// stopWaiting withdraws p's waiter, if the ack has not taken it.
func (p *Pending) stopWaiting() { p.c.acks.withdraw(p.st, p.w) }

// finish records p's outcome, counts it and gives back the req_id's turn.
func (p *Pending) finish(f *Frame, err error) {
	p.f, p.err = f, err
	p.c.acks.release(p.reqID, p.st)
	if p.c.cfg.Frames != nil {
		p.c.cfg.Frames.FrameOut(p.c.cfg.BotID, p.cmd, outcomeCode(f, err))
	}
}

// Acked is when the connection read the frame's ack (zero if none came):
// valid after Wait.
func (p *Pending) Acked() time.Time { return p.ackedAt }

// Wait waits for the frame's ack: AckTimeout from the write, or ctx, or
// the connection's end, whichever is first. The end is when the socket
// is no longer read, not when closing starts: an ack read during Close's
// handshake still counts. The outcomes are Do's.
func (p *Pending) Wait(ctx context.Context) (*Frame, error) {
	p.once.Do(func() { p.finish(p.wait(ctx)) })
	return p.f, p.err
}

func (p *Pending) wait(ctx context.Context) (f *Frame, err error) {
	c := p.c
	t := clock.Or(c.cfg.Clock).NewTimer(c.cfg.AckTimeout - time.Since(p.written))
	defer t.Stop()
	select {
	case a := <-p.w:
		f, p.ackedAt = a.f, a.at
	case <-t.C():
		return nil, p.timedOut()
	case <-ctx.Done():
		p.stopWaiting()
		return nil, ctx.Err()
	case <-c.end.closing:
		// The frame was written before the connection started closing:
		// its ack may still be read (the ack that closed it, 846609, or
		// one the server sent before it saw Close's frame, read during
		// the handshake). Only once the reader has stopped is it lost.
		select {
		case a := <-p.w:
			f, p.ackedAt = a.f, a.at
		case <-c.end.readEnded:
			select {
			case a := <-p.w: // read last
				f, p.ackedAt = a.f, a.at
			default:
				p.stopWaiting()
				return nil, c.closeErr()
			}
		case <-t.C():
			return nil, p.timedOut()
		case <-ctx.Done():
			p.stopWaiting()
			return nil, ctx.Err()
		}
	}
	if p.ambiguous {
		c.vitals.failed(true)
		return nil, fmt.Errorf("%w: %s (req_id %s): an earlier frame of this req_id timed out and the ack that came (errcode %d) may be its",
			ErrAckUnknown, p.cmd, p.reqID, f.ErrCode)
	}
	if f.ErrCode != ErrCodeOK {
		c.vitals.failed(false)
		if f.ErrCode == ErrCodeRateLimited {
			c.vitals.rateLimited.Add(1)
		}
		return f, &AckError{Cmd: p.cmd, ReqID: p.reqID, ErrCode: f.ErrCode, ErrMsg: f.ErrMsg}
	}
	c.vitals.ok()
	return f, nil
}

// timedOut ends p's wait at AckTimeout: the frame's outcome is unknown
// (ErrAckTimeout), and MaxAckTimeouts in a row close the connection.
func (p *Pending) timedOut() error {
	c := p.c
	p.stopWaiting()
	c.acks.lastTimeout.Store(time.Now().UnixNano())
	c.vitals.failed(true)
	if n := int(c.acks.timeouts.Add(1)); n >= c.cfg.MaxAckTimeouts {
		c.shut(ReasonAckTimeouts, fmt.Errorf("%d frames in a row without an ack within %s", n, c.cfg.AckTimeout))
	}
	return &ackTimeoutError{cmd: p.cmd, reqID: p.reqID, after: c.cfg.AckTimeout}
}

// outcomeCode is a sent frame's errcode for FrameObserver: the ack's, or
// -1 when none came that can be trusted.
func outcomeCode(f *Frame, err error) int {
	var ae *AckError
	switch {
	case errors.As(err, &ae):
		return ae.ErrCode
	case err != nil || f == nil:
		return -1
	default:
		return f.ErrCode
	}
}
