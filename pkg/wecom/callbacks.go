package wecom

import (
	"encoding/json"
	"sync"
)

// Handler receives one connection's callbacks. It is given to Dial and
// belongs to that connection alone: a new connection never inherits it.
// Its methods are called one at a time, in arrival order, on the
// connection's own goroutine; a call that blocks delays later callbacks
// (never acks), so hand long work off. A nil Handler drops every callback.
//
// Every callback read from the socket is handed to the Handler exactly
// once, however the connection ends (Close, kicked, network, heartbeat,
// backlog): WeCom does not ack callbacks and would not send them again, so
// dropping one read here would lose it. Calls made after the connection
// started closing see c.Reason() != ReasonNone, and replies on c then fail
// with ErrClosed: persist the message and answer it another way (proactive
// push), or, if the caller must no longer act for the bot (leadership
// lost), leave it to the next leader's gap backfill.
//
// Every call has returned when Done is closed: wait on Done before building
// the next connection, and no message is ever handled by two generations of
// handlers. A call that never returns keeps Done open.
type Handler interface {
	// Message is an aibot_msg_callback: a user's message, answered on reqID.
	Message(c *Conn, reqID string, m *MsgCallback)
	// Event is an aibot_event_callback (enter_chat, template_card_event,
	// feedback_event), answered on reqID. A disconnected_event is not
	// handed over: it ends the connection (ReasonKicked).
	Event(c *Conn, reqID string, ev *EventCallback)
}

// MessageFunc is a Handler of messages alone; events are dropped. It lets
// a plain function be a Handler, as http.HandlerFunc does.
type MessageFunc func(c *Conn, reqID string, m *MsgCallback)

// Message calls f.
func (f MessageFunc) Message(c *Conn, reqID string, m *MsgCallback) { f(c, reqID, m) }

// Event drops ev.
func (MessageFunc) Event(*Conn, string, *EventCallback) {}

// callbackQueue carries callbacks from the reader to the Handler, in
// order. The reader never waits on it; the bound (Config.CallbackQueue) is
// enforced by closing the connection, not by blocking (see read).
type callbackQueue struct {
	h     Handler
	limit int

	mu       sync.Mutex
	q        []*Frame      // callbacks read, not yet delivered
	ready    chan struct{} // signalled when q grows
	readDone chan struct{} // closed when the reader has stopped adding to q
}

func newCallbackQueue(h Handler, limit int) *callbackQueue {
	return &callbackQueue{h: h, limit: limit, ready: make(chan struct{}, 1), readDone: make(chan struct{})}
}

// push hands a callback to the dispatcher without ever blocking the
// reader. It reports whether there is room for another one: false once
// CallbackQueue callbacks wait (this one is queued all the same).
func (q *callbackQueue) push(f *Frame) bool {
	q.mu.Lock()
	q.q = append(q.q, f)
	n := len(q.q)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return n < q.limit
}

// pop removes the oldest queued callback, nil if none. One at a time, so
// that everything not yet handed to the Handler counts against the bound.
func (q *callbackQueue) pop() *Frame {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.q) == 0 {
		return nil
	}
	f := q.q[0]
	q.q[0] = nil
	q.q = q.q[1:]
	return f
}

// readerStopped tells the dispatcher that no callback will be pushed any
// more: it hands over what is queued and returns.
func (q *callbackQueue) readerStopped() { close(q.readDone) }

// dispatch hands callbacks to the Handler until the reader has stopped
// and the queue is empty: whatever ended the connection, every callback
// read is handed over (see Handler).
func (c *Conn) dispatch() {
	defer c.wg.Done()
	q := c.callbacks
	for {
		select {
		case <-q.readDone:
			for f := q.pop(); f != nil; f = q.pop() {
				c.deliver(f)
			}
			return
		case <-q.ready:
		}
		for f := q.pop(); f != nil; f = q.pop() {
			c.deliver(f)
		}
	}
}

func (c *Conn) deliver(f *Frame) {
	h := c.callbacks.h
	switch f.Cmd {
	case CmdMsgCallback:
		var m MsgCallback
		if err := json.Unmarshal(f.Body, &m); err != nil {
			c.log.Warn().Err(err).Str("req_id", f.Headers.ReqID).Msg("malformed message callback; ignored")
			return
		}
		if h != nil {
			h.Message(c, f.Headers.ReqID, &m)
		}
	case CmdEventCallback:
		var ev EventCallback
		if err := json.Unmarshal(f.Body, &ev); err != nil {
			c.log.Warn().Err(err).Str("req_id", f.Headers.ReqID).Msg("malformed event callback; ignored")
			return
		}
		if h != nil {
			h.Event(c, f.Headers.ReqID, &ev)
		}
	}
}
