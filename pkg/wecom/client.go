package wecom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/botctl/botctl/pkg/redact"
	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"
)

// Config configures one connection. Zero values take the defaults named on
// each field.
type Config struct {
	// URL is the WebSocket endpoint, e.g. wss://openws.work.weixin.qq.com.
	URL string
	// BotID and Secret authenticate the connection. The secret never
	// appears in logs or errors.
	BotID  string
	Secret string
	// DialTimeout bounds the dial and the subscribe ack together. Default 10s.
	DialTimeout time.Duration
	// HeartbeatInterval is the application ping period. Default 30s, as the
	// official SDK. Lower detects a dead connection sooner and costs frames.
	HeartbeatInterval time.Duration
	// MaxMissedPings is how many pings in a row may go unacked before the
	// connection is declared dead (ReasonHeartbeatLost). Default 2.
	MaxMissedPings int
	// AckTimeout is how long a frame waits for its ack. Default 5s, as the
	// official SDK. The next frame of the same req_id is sent only after the
	// ack or this timeout. Lower fails faster on a slow server but makes
	// late acks (and so ErrAckUnknown) more frequent.
	AckTimeout time.Duration
	// MaxAckTimeouts is how many frames in a row may time out waiting for
	// their ack before the connection is declared dead and closed
	// (ReasonAckTimeouts); any ack that arrives resets the count. Default 3.
	// Lower gives up on a stalled server sooner; higher rides out longer
	// stalls at the cost of more unknown outcomes on one connection.
	MaxAckTimeouts int
	// CallbackQueue is the most callbacks that may wait for the handlers.
	// Reading never pauses for a slow handler (acks and heartbeats share the
	// socket and would starve behind callbacks); when the queue is full the
	// connection is closed instead (ReasonBacklog), after the callbacks
	// already read are handed over. Default 1024. Higher absorbs longer
	// handler stalls at the cost of memory and of a longer drain at close.
	CallbackQueue int
	// Header is sent with the WebSocket handshake.
	Header http.Header
	// BeforeSubscribe, if set, is called after the WebSocket handshake and
	// right before the subscribe frame is written; an error aborts the dial
	// (the socket is closed, nothing was sent). The election's last word:
	// a node whose term ended during the handshake never subscribes.
	BeforeSubscribe func() error
	// Logger receives connection events; bot and conn fields are added.
	Logger zerolog.Logger
	// Frames, if set, counts frames: every callback read and every frame
	// sent with its outcome (for metrics; called on the hot path, so it
	// must not block).
	Frames FrameObserver
}

// FrameObserver learns of frames on a connection. Errcode is the ack's
// errcode of a frame sent, or -1 when no ack came (timeout, closed,
// ambiguous).
type FrameObserver interface {
	FrameIn(bot, cmd string)
	FrameOut(bot, cmd string, errcode int)
}

func (c *Config) setDefaults() {
	if c.DialTimeout <= 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 30 * time.Second
	}
	if c.MaxMissedPings <= 0 {
		c.MaxMissedPings = 2
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = 5 * time.Second
	}
	if c.MaxAckTimeouts <= 0 {
		c.MaxAckTimeouts = 3
	}
	if c.CallbackQueue <= 0 {
		c.CallbackQueue = 1024
	}
}

func (c *Config) validate() error {
	switch {
	case c.URL == "":
		return errors.New("wecom: Config.URL is empty: set the WeCom WebSocket URL (wss://openws.work.weixin.qq.com, or the simulator's ws://127.0.0.1:PORT/)")
	case !strings.HasPrefix(c.URL, "ws://") && !strings.HasPrefix(c.URL, "wss://"):
		return fmt.Errorf("wecom: Config.URL %q: want a ws:// or wss:// URL", redact.URL(c.URL))
	case c.BotID == "":
		return errors.New("wecom: Config.BotID is empty")
	case c.Secret == "":
		return fmt.Errorf("wecom: bot %s: Config.Secret is empty", c.BotID)
	}
	return nil
}

// Handlers receive one connection's callbacks. They are given to Dial and
// belong to that connection alone: a new connection never inherits them.
// They are called one at a time, in arrival order, on the connection's own
// goroutine; a handler that blocks delays later callbacks (never acks), so
// hand long work off.
//
// Every callback read from the socket is handed to a handler exactly once,
// however the connection ends (Close, kicked, network, heartbeat, backlog):
// WeCom does not ack callbacks and would not send them again, so dropping
// one read here would lose it. Calls made after the connection started
// closing see c.Reason() != ReasonNone, and replies on c then fail with
// ErrClosed: persist the message and answer it another way (proactive
// push), or, if the caller must no longer act for the bot (leadership
// lost), leave it to the next leader's gap backfill.
//
// Every call has returned when Done is closed: wait on Done before building
// the next connection, and no message is ever handled by two generations of
// handlers. A handler that never returns keeps Done open.
type Handlers struct {
	OnMessage func(c *Conn, reqID string, msg *MsgCallback)
	OnEvent   func(c *Conn, reqID string, ev *EventCallback)
}

var connSeq atomic.Uint64

// Conn is one subscribed connection of one bot.
type Conn struct {
	cfg  Config
	id   uint64
	ws   *websocket.Conn
	h    Handlers
	log  zerolog.Logger
	wmu  sync.Mutex // one writer at a time (gorilla/websocket's rule)
	pmu  sync.Mutex
	reqs map[string]*reqState // req_id → its frames' state

	cbMu     sync.Mutex
	cbq      []*Frame               // callbacks read, not yet delivered
	cbReady  chan struct{}          // signalled when cbq grows
	readDone chan struct{}          // closed when the reader has stopped adding to cbq
	missed   atomic.Int32           // pings in a row without an ack
	timeouts atomic.Int32           // frames in a row whose ack timed out
	probes   map[string]chan *Frame // Probe's pings awaiting their ack (pmu)
	vitals   vitals
	// Ack flow, for AcksOverdue: frames waiting for their ack now and
	// since when some have (pmu); the last ack of any frame read, and the
	// last ack timeout (unix ns).
	inflight      int
	inflightSince time.Time
	lastAck       atomic.Int64
	lastTimeout   atomic.Int64

	closeOnce sync.Once
	closing   chan struct{} // closed when the connection starts closing
	closed    atomic.Bool   // no handler call starts once set
	done      chan struct{} // closed when every goroutine has ended
	errMu     sync.Mutex
	err       *CloseError
	wg        sync.WaitGroup
}

// reqState is what the connection knows about one req_id's frames. Guarded
// by Conn.pmu; dropped when no caller holds it and no ack is owed.
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

// Dial connects, subscribes and starts the heartbeat. A refused subscribe is
// an *AuthError (errors.Is(err, ErrAuthFailed)) only for an authentication
// errcode (wrong, unknown or revoked credentials): retrying it never helps.
// Any other refusal (command conflict, system busy…) is a *SubscribeError
// (errors.Is(err, ErrSubscribeRefused)), and dial or network failures are
// plain errors: back off and retry those.
func Dial(ctx context.Context, cfg Config, h Handlers) (*Conn, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	d := websocket.Dialer{HandshakeTimeout: cfg.DialTimeout, Proxy: http.ProxyFromEnvironment}
	ws, resp, err := d.DialContext(ctx, cfg.URL, cfg.Header)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, redact.Error(fmt.Errorf("wecom: bot %s: dial %s: %w", cfg.BotID, cfg.URL, err))
	}
	c := &Conn{
		cfg:      cfg,
		id:       connSeq.Add(1),
		ws:       ws,
		h:        h,
		reqs:     make(map[string]*reqState),
		probes:   make(map[string]chan *Frame),
		cbReady:  make(chan struct{}, 1),
		readDone: make(chan struct{}),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
	}
	c.log = cfg.Logger.With().Str("bot", cfg.BotID).Uint64("conn", c.id).Logger()
	ws.SetReadLimit(4 * MaxFrameBytes)
	if cfg.BeforeSubscribe != nil {
		if err := cfg.BeforeSubscribe(); err != nil {
			ws.Close()
			return nil, fmt.Errorf("wecom: bot %s: not subscribing: %w", cfg.BotID, err)
		}
	}
	early, err := c.subscribe(ctx)
	if err != nil {
		ws.Close()
		return nil, err
	}
	// Early callbacks are few (what arrived with the subscribe ack) and
	// are queued whatever the bound: they were read and must be handed over.
	for _, f := range early {
		c.enqueue(f)
	}
	c.log.Info().Msg("wecom connection subscribed")
	c.vitals.connected.Store(time.Now().UnixNano())
	c.wg.Add(2)
	go c.dispatch()
	go c.heartbeat()
	go c.read()
	return c, nil
}

// subscribe sends aibot_subscribe and reads until its ack, before any other
// goroutine touches the socket. Callbacks that arrive before the ack are
// kept and delivered after it, never dropped.
func (c *Conn) subscribe(ctx context.Context) (early []*Frame, err error) {
	reqID := NewReqID(CmdSubscribe)
	raw, err := encodeFrame(CmdSubscribe, reqID, SubscribeBody{BotID: c.cfg.BotID, Secret: c.cfg.Secret})
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	c.ws.SetWriteDeadline(deadline)
	if err := c.ws.WriteMessage(websocket.TextMessage, raw); err != nil {
		return nil, fmt.Errorf("wecom: bot %s: send subscribe: %w", c.cfg.BotID, err)
	}
	c.ws.SetReadDeadline(deadline)
	defer c.ws.SetReadDeadline(time.Time{})
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			return nil, fmt.Errorf("wecom: bot %s: waiting for subscribe ack: %w", c.cfg.BotID, err)
		}
		var f Frame
		switch err := json.Unmarshal(data, &f); {
		case err != nil:
			c.log.Warn().Err(err).Msg("malformed frame before subscribe ack; ignored")
		case f.Cmd == CmdMsgCallback || (f.Cmd == CmdEventCallback && !isDisconnected(f.Body)):
			early = append(early, &f)
		case !f.IsAck() || f.Headers.ReqID != reqID:
			c.log.Warn().Str("cmd", f.Cmd).Msg("unexpected frame before subscribe ack; ignored")
		case f.ErrCode != ErrCodeOK && IsAuthErrCode(f.ErrCode):
			return nil, &AuthError{BotID: c.cfg.BotID, ErrCode: f.ErrCode, ErrMsg: f.ErrMsg}
		case f.ErrCode != ErrCodeOK:
			return nil, &SubscribeError{BotID: c.cfg.BotID, ErrCode: f.ErrCode, ErrMsg: f.ErrMsg}
		default:
			return early, nil
		}
	}
}

// ID is a process-local number for logs.
func (c *Conn) ID() uint64 { return c.id }

// BotID is the bot this connection belongs to.
func (c *Conn) BotID() string { return c.cfg.BotID }

// Done is closed when the connection has ended, every callback read from
// the socket has been handed to the handlers and every handler call has
// returned. Wait on it, then read Err for the reason.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is nil while the connection is open, then a *CloseError.
func (c *Conn) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	if c.err == nil {
		return nil
	}
	return c.err
}

// Reason is why the connection ended, or ReasonNone while it is open.
func (c *Conn) Reason() CloseReason {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	if c.err == nil {
		return ReasonNone
	}
	return c.err.Reason
}

// Close ends the connection (ReasonClosedByUs) and returns at once; it may
// be called from a handler. Nothing more can be sent. It is the closing
// handshake: a close frame goes to the server, and the socket is read on
// until the server's close frame comes back (at most CloseGrace), so a
// callback the server sent before it saw ours is read, not lost in the
// socket; every callback read is handed to the handlers (see Handlers).
// Wait on Done for that and for the goroutines to end.
func (c *Conn) Close() error {
	c.shut(ReasonClosedByUs, nil)
	return nil
}

// CloseUnhealthy closes the connection with ReasonUnhealthy and cause: the
// health monitor's way to drop a dead or deaf connection and reconnect.
func (c *Conn) CloseUnhealthy(cause error) {
	c.shut(ReasonUnhealthy, cause)
}

// shut records the first reason and tears the socket down; later calls are
// no-ops.
func (c *Conn) shut(reason CloseReason, cause error) {
	c.closeOnce.Do(func() {
		c.errMu.Lock()
		c.err = &CloseError{Reason: reason, Cause: cause}
		c.errMu.Unlock()
		c.closed.Store(true)
		close(c.closing)
		ev := c.log.Info()
		if reason != ReasonClosedByUs {
			ev = c.log.Warn()
		}
		ev.Str("reason", reason.String()).AnErr("cause", cause).Msg("wecom connection closing")
		msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, reason.String())
		err := c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
		if reason == ReasonClosedByUs && err == nil {
			// The reader reads on until the server's close (the
			// handshake) or the grace, then closes the socket.
			_ = c.ws.SetReadDeadline(time.Now().Add(CloseGrace))
			return
		}
		_ = c.ws.Close()
	})
}

// CloseGrace bounds Close's handshake: how long the socket is read after
// the close frame was sent, waiting for the server's.
const CloseGrace = 2 * time.Second

func (c *Conn) closeErr() error {
	<-c.closing
	return c.Err()
}

// read owns the socket's read side; when it ends the connection is over.
// Acks are handled here, on the reader itself, so they never wait behind
// callbacks; callbacks go to the bounded queue the dispatcher drains.
func (c *Conn) read() {
	defer func() {
		_ = c.ws.Close() // already, unless Close's handshake ended here
		close(c.readDone)
		c.wg.Wait()
		close(c.done)
	}()
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			c.shut(ReasonNetwork, err)
			return
		}
		var f Frame
		if err := json.Unmarshal(data, &f); err != nil {
			c.log.Warn().Err(err).Int("bytes", len(data)).Msg("malformed frame from server; ignored")
			continue
		}
		switch {
		case f.IsAck():
			c.ack(&f)
		case f.Cmd == CmdEventCallback && isDisconnected(f.Body):
			c.shut(ReasonKicked, errors.New("disconnected_event: another connection subscribed with this bot id"))
			return
		case f.Cmd == CmdMsgCallback || f.Cmd == CmdEventCallback:
			if c.cfg.Frames != nil {
				c.cfg.Frames.FrameIn(c.cfg.BotID, f.Cmd)
			}
			c.vitals.callback.Store(time.Now().UnixNano())
			c.vitals.callbacks.Add(1)
			if !c.enqueue(&f) {
				c.shut(ReasonBacklog, fmt.Errorf("%d callbacks waiting for the handlers (Config.CallbackQueue): handlers too slow; hand long work off", c.cfg.CallbackQueue))
				return
			}
		default:
			c.log.Warn().Str("cmd", f.Cmd).Msg("unknown frame from server; ignored")
		}
	}
}

func isDisconnected(body json.RawMessage) bool {
	var ev EventCallback
	return json.Unmarshal(body, &ev) == nil && ev.Event.EventType == EventDisconnected
}

func (c *Conn) ack(f *Frame) {
	c.lastAck.Store(time.Now().UnixNano())
	id := f.Headers.ReqID
	if strings.HasPrefix(id, CmdPing+"_") {
		c.pmu.Lock()
		if w := c.probes[id]; w != nil {
			delete(c.probes, id)
			w <- f // buffered, one slot
		}
		c.pmu.Unlock()
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
	c.pmu.Lock()
	st := c.reqs[id]
	if st == nil || st.unacked == 0 {
		c.pmu.Unlock()
		c.log.Warn().Str("req_id", id).Int("errcode", f.ErrCode).Msg("ack for no frame sent on this req_id; ignored")
		return
	}
	st.unacked--
	w := st.waiter
	st.waiter = nil
	if w != nil {
		c.inflight--
	}
	c.forgetLocked(id, st)
	c.pmu.Unlock()
	c.timeouts.Store(0)
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

// forgetLocked drops a req_id's state once nobody holds it and no ack is
// owed. Call with pmu held.
func (c *Conn) forgetLocked(id string, st *reqState) {
	if st.refs == 0 && st.unacked == 0 && c.reqs[id] == st {
		delete(c.reqs, id)
	}
}

// enqueue hands a callback to the dispatcher without ever blocking the
// reader. It reports whether there is room for another one: false once
// CallbackQueue callbacks wait (this one is queued all the same).
func (c *Conn) enqueue(f *Frame) bool {
	c.cbMu.Lock()
	c.cbq = append(c.cbq, f)
	n := len(c.cbq)
	c.cbMu.Unlock()
	select {
	case c.cbReady <- struct{}{}:
	default:
	}
	return n < c.cfg.CallbackQueue
}

// next removes the oldest queued callback, nil if none. One at a time, so
// that everything not yet handed to a handler counts against the bound.
func (c *Conn) next() *Frame {
	c.cbMu.Lock()
	defer c.cbMu.Unlock()
	if len(c.cbq) == 0 {
		return nil
	}
	f := c.cbq[0]
	c.cbq[0] = nil
	c.cbq = c.cbq[1:]
	return f
}

// dispatch hands callbacks to the handlers until the reader has stopped
// and the queue is empty: whatever ended the connection, every callback
// read is handed over (see Handlers).
func (c *Conn) dispatch() {
	defer c.wg.Done()
	for {
		select {
		case <-c.readDone:
			for f := c.next(); f != nil; f = c.next() {
				c.deliver(f)
			}
			return
		case <-c.cbReady:
		}
		for f := c.next(); f != nil; f = c.next() {
			c.deliver(f)
		}
	}
}

func (c *Conn) deliver(f *Frame) {
	switch f.Cmd {
	case CmdMsgCallback:
		var m MsgCallback
		if err := json.Unmarshal(f.Body, &m); err != nil {
			c.log.Warn().Err(err).Str("req_id", f.Headers.ReqID).Msg("malformed message callback; ignored")
			return
		}
		if c.h.OnMessage != nil {
			c.h.OnMessage(c, f.Headers.ReqID, &m)
		}
	case CmdEventCallback:
		var ev EventCallback
		if err := json.Unmarshal(f.Body, &ev); err != nil {
			c.log.Warn().Err(err).Str("req_id", f.Headers.ReqID).Msg("malformed event callback; ignored")
			return
		}
		if c.h.OnEvent != nil {
			c.h.OnEvent(c, f.Headers.ReqID, &ev)
		}
	}
}

func (c *Conn) heartbeat() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-c.closing:
			return
		case <-t.C:
		}
		// Checked before the next ping, as the official SDK does: after
		// MaxMissedPings unacked pings the connection is dead.
		if n := int(c.missed.Load()); n >= c.cfg.MaxMissedPings {
			c.shut(ReasonHeartbeatLost, fmt.Errorf("%d pings in a row without an ack", n))
			return
		}
		c.missed.Add(1)
		raw, _ := encodeFrame(CmdPing, NewReqID(CmdPing), nil)
		c.vitals.pingSent.Store(time.Now().UnixNano()) // before its ack can be read
		if err := c.write(raw); err != nil {
			return
		}
	}
}

func (c *Conn) write(raw []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed.Load() {
		return c.closeErr()
	}
	c.ws.SetWriteDeadline(time.Now().Add(c.cfg.AckTimeout))
	if err := c.ws.WriteMessage(websocket.TextMessage, raw); err != nil {
		c.shut(ReasonNetwork, err)
		return c.closeErr()
	}
	return nil
}

// acquire waits for the req_id's turn: frames of one req_id go one at a
// time, each after the previous one's ack or timeout.
func (c *Conn) acquire(ctx context.Context, reqID string) (st *reqState, release func(), err error) {
	c.pmu.Lock()
	st = c.reqs[reqID]
	if st == nil {
		st = &reqState{turn: make(chan struct{}, 1)}
		c.reqs[reqID] = st
	}
	st.refs++
	c.pmu.Unlock()
	drop := func() {
		c.pmu.Lock()
		st.refs--
		c.forgetLocked(reqID, st)
		c.pmu.Unlock()
	}
	select {
	case st.turn <- struct{}{}:
		return st, func() { <-st.turn; drop() }, nil
	case <-ctx.Done():
		drop()
		return nil, nil, ctx.Err()
	case <-c.closing:
		drop()
		return nil, nil, c.closeErr()
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
	release    func()
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
	var release func()
	if err == nil {
		st, release, err = c.acquire(ctx, reqID)
	}
	if err != nil {
		if c.cfg.Frames != nil {
			c.cfg.Frames.FrameOut(c.cfg.BotID, cmd, outcomeCode(nil, err))
		}
		return nil, err
	}
	p = &Pending{c: c, cmd: cmd, reqID: reqID, st: st, w: make(chan acked, 1), release: release}
	c.pmu.Lock()
	// An ack owed to an earlier frame would be indistinguishable from this
	// frame's: decided before sending, so no ack can race the decision.
	p.ambiguous = st.unacked > 0
	st.unacked++
	st.waiter = p.w
	if c.inflight == 0 {
		c.inflightSince = time.Now()
	}
	c.inflight++
	c.pmu.Unlock()
	p.written = time.Now()
	if err := c.write(raw); err != nil {
		p.stopWaiting()
		p.once.Do(func() { p.finish(nil, err) })
		return nil, err
	}
	return p, nil
}

// stopWaiting withdraws p's waiter, if the ack has not taken it.
func (p *Pending) stopWaiting() {
	c := p.c
	c.pmu.Lock()
	if p.st.waiter == p.w {
		p.st.waiter = nil
		c.inflight--
	}
	c.pmu.Unlock()
}

// finish records p's outcome, counts it and gives back the req_id's turn.
func (p *Pending) finish(f *Frame, err error) {
	p.f, p.err = f, err
	p.release()
	if p.c.cfg.Frames != nil {
		p.c.cfg.Frames.FrameOut(p.c.cfg.BotID, p.cmd, outcomeCode(f, err))
	}
}

// Acked is when the connection read the frame's ack (zero if none came):
// valid after Wait.
func (p *Pending) Acked() time.Time { return p.ackedAt }

// Wait waits for the frame's ack: AckTimeout from the write, or ctx, or
// the connection's end, whichever is first. The outcomes are Do's.
func (p *Pending) Wait(ctx context.Context) (*Frame, error) {
	p.once.Do(func() { p.finish(p.wait(ctx)) })
	return p.f, p.err
}

func (p *Pending) wait(ctx context.Context) (f *Frame, err error) {
	c := p.c
	t := time.NewTimer(c.cfg.AckTimeout - time.Since(p.written))
	defer t.Stop()
	select {
	case a := <-p.w:
		f, p.ackedAt = a.f, a.at
	case <-t.C:
		p.stopWaiting()
		c.lastTimeout.Store(time.Now().UnixNano())
		c.vitals.failed(true)
		if n := int(c.timeouts.Add(1)); n >= c.cfg.MaxAckTimeouts {
			c.shut(ReasonAckTimeouts, fmt.Errorf("%d frames in a row without an ack within %s", n, c.cfg.AckTimeout))
		}
		return nil, &ackTimeoutError{cmd: p.cmd, reqID: p.reqID, after: c.cfg.AckTimeout}
	case <-ctx.Done():
		p.stopWaiting()
		return nil, ctx.Err()
	case <-c.closing:
		select {
		case a := <-p.w: // the ack that closed the connection (846609)
			f, p.ackedAt = a.f, a.at
		default:
			p.stopWaiting()
			return nil, c.closeErr()
		}
	}
	if p.ambiguous {
		c.vitals.failed(true)
		return nil, fmt.Errorf("%w: %s (req_id %s): an earlier frame of this req_id timed out and the ack that came (errcode %d) may be its",
			ErrAckUnknown, p.cmd, p.reqID, f.ErrCode)
	}
	if f.ErrCode != ErrCodeOK {
		c.vitals.failed(false)
		return f, &AckError{Cmd: p.cmd, ReqID: p.reqID, ErrCode: f.ErrCode, ErrMsg: f.ErrMsg}
	}
	c.vitals.ok()
	return f, nil
}

// Reply sends aibot_respond_msg on a callback's req_id.
func (c *Conn) Reply(ctx context.Context, reqID string, body *RespondBody) error {
	if body.Stream != nil {
		if err := CheckStream(body.Stream); err != nil {
			return err
		}
	}
	_, err := c.Do(ctx, CmdRespondMsg, reqID, body)
	return err
}

// ReplyStream sends one frame of a streamed reply. Content is the whole
// text so far.
func (c *Conn) ReplyStream(ctx context.Context, reqID string, s Stream) error {
	return c.Reply(ctx, reqID, &RespondBody{MsgType: MsgTypeStream, Stream: &s})
}

// SendStream writes one frame of a streamed reply without waiting for its
// ack (Send): the caller must Wait for it.
func (c *Conn) SendStream(ctx context.Context, reqID string, s Stream) (*Pending, error) {
	if err := CheckStream(&s); err != nil {
		return nil, err
	}
	return c.Send(ctx, CmdRespondMsg, reqID, &RespondBody{MsgType: MsgTypeStream, Stream: &s})
}

// ReplyWelcome answers an enter_chat event (within 5 s of it).
func (c *Conn) ReplyWelcome(ctx context.Context, reqID string, body *WelcomeBody) error {
	if body.Text != nil {
		if err := CheckContent(body.Text.Content); err != nil {
			return err
		}
	}
	_, err := c.Do(ctx, CmdRespondWelcomeMsg, reqID, body)
	return err
}

// UpdateTemplateCard answers a template_card_event (within 5 s of it).
func (c *Conn) UpdateTemplateCard(ctx context.Context, reqID string, body *UpdateBody) error {
	_, err := c.Do(ctx, CmdRespondUpdateMsg, reqID, body)
	return err
}

// SendMessage is a proactive push (aibot_send_msg) on a new req_id.
func (c *Conn) SendMessage(ctx context.Context, body *SendMsgBody) error {
	if body.ChatID == "" {
		return fmt.Errorf("%w: aibot_send_msg without chatid", ErrInvalidFrame)
	}
	if body.Markdown != nil {
		if err := CheckContent(body.Markdown.Content); err != nil {
			return err
		}
	}
	_, err := c.Do(ctx, CmdSendMsg, NewReqID(CmdSendMsg), body)
	return err
}

// SendMarkdown pushes markdown to a chat (chatType 0 lets WeCom infer it).
func (c *Conn) SendMarkdown(ctx context.Context, chatID string, chatType int, content string) error {
	return c.SendMessage(ctx, &SendMsgBody{ChatID: chatID, ChatType: chatType, MsgType: MsgTypeMarkdown, Markdown: &TextContent{Content: content}})
}

// CheckContent enforces the content limit before a frame is sent.
func CheckContent(s string) error {
	if len(s) > MaxContentBytes {
		return fmt.Errorf("%w: %d bytes, limit %d (split the text, e.g. at paragraph boundaries)", ErrContentTooLarge, len(s), MaxContentBytes)
	}
	if !utf8.ValidString(s) {
		return ErrInvalidUTF8
	}
	return nil
}

// CheckStream enforces the stream rules the client can know by itself.
func CheckStream(s *Stream) error {
	if s.ID == "" {
		return fmt.Errorf("%w: stream without id", ErrInvalidFrame)
	}
	if len(s.MsgItem) > 0 && !s.Finish {
		return fmt.Errorf("%w: msg_item is allowed only on the finishing frame", ErrInvalidFrame)
	}
	if len(s.MsgItem) > MaxMsgItems {
		return fmt.Errorf("%w: %d msg_items, limit %d", ErrInvalidFrame, len(s.MsgItem), MaxMsgItems)
	}
	return CheckContent(s.Content)
}

func encodeFrame(cmd, reqID string, body any) ([]byte, error) {
	f := struct {
		Cmd     string  `json:"cmd"`
		Headers Headers `json:"headers"`
		Body    any     `json:"body,omitempty"`
	}{cmd, Headers{ReqID: reqID}, body}
	raw, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("wecom: encode %s: %w", cmd, err)
	}
	if len(raw) > MaxFrameBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, limit %d", ErrFrameTooLarge, cmd, len(raw), MaxFrameBytes)
	}
	return raw, nil
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
