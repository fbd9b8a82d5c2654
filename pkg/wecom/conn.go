package wecom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/redact"
	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"
)

var connSeq atomic.Uint64

// Conn is one subscribed connection of one bot. Its life: Dial subscribes
// and starts three goroutines (the reader, the heartbeat and the
// dispatcher of callbacks); the first reason to end (shut) closes the
// socket, or starts Close's handshake; Done is closed once all three have
// ended. Frames per req_id and their acks are in acks.go, the callbacks'
// way to the Handler in callbacks.go.
type Conn struct {
	cfg    Config
	id     uint64
	ws     *websocket.Conn
	log    zerolog.Logger
	wmu    sync.Mutex   // one writer at a time (gorilla/websocket's rule)
	missed atomic.Int32 // pings in a row without an ack
	vitals vitals
	routes routeCounts

	acks      *acks          // req_id turns, acks owed, probes
	callbacks *callbackQueue // callbacks read, on their way to the Handler
	end       ending
	wg        sync.WaitGroup // the heartbeat and the dispatcher
	done      chan struct{}  // closed when every goroutine has ended
}

// ending is how a connection ends: the first reason recorded wins.
type ending struct {
	once    sync.Once
	closing chan struct{} // closed when the connection starts closing
	closed  atomic.Bool   // no write starts once set
	// readEnded is closed when the reader has stopped: no ack can come
	// any more. Until then a frame written before closing may still get
	// its ack (Close's handshake reads on).
	readEnded chan struct{}

	mu  sync.Mutex
	err *CloseError
}

// begin records the reason and signals closing. Call once (under once).
func (e *ending) begin(reason CloseReason, cause error) {
	e.mu.Lock()
	e.err = &CloseError{Reason: reason, Cause: cause}
	e.mu.Unlock()
	e.closed.Store(true)
	close(e.closing)
}

// closeError is the recorded *CloseError, nil while open.
func (e *ending) closeError() *CloseError {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Dial connects, subscribes and starts the heartbeat. A refused subscribe is
// an *AuthError (errors.Is(err, ErrAuthFailed)) only for an authentication
// errcode (wrong, unknown or revoked credentials): retrying it never helps.
// Any other refusal (command conflict, system busy…) is a *SubscribeError
// (errors.Is(err, ErrSubscribeRefused)), and dial or network failures are
// plain errors: back off and retry those. h receives the connection's
// callbacks (see Handler).
func Dial(ctx context.Context, cfg Config, h Handler) (*Conn, error) {
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
		cfg:       cfg,
		id:        connSeq.Add(1),
		ws:        ws,
		acks:      newAcks(),
		callbacks: newCallbackQueue(h, cfg.CallbackQueue),
		end:       ending{closing: make(chan struct{}), readEnded: make(chan struct{})},
		done:      make(chan struct{}),
	}
	c.log = cfg.Logger.With().Str("bot", cfg.BotID).Uint64("conn", c.id).Logger()
	ws.SetReadLimit(4 * MaxFrameBytes)
	if cfg.BeforeSubscribe != nil {
		if err := cfg.BeforeSubscribe.Check(); err != nil {
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
		c.callbacks.push(f)
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
// the socket has been handed to the Handler and every Handler call has
// returned. Wait on it, then read Err for the reason.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is nil while the connection is open, then a *CloseError.
func (c *Conn) Err() error {
	if err := c.end.closeError(); err != nil {
		return err
	}
	return nil
}

// Reason is why the connection ended, or ReasonNone while it is open.
func (c *Conn) Reason() CloseReason {
	if err := c.end.closeError(); err != nil {
		return err.Reason
	}
	return ReasonNone
}

// Close ends the connection (ReasonClosedByUs) and returns at once; it may
// be called from a handler. Nothing more can be sent. It is the closing
// handshake: a close frame goes to the server, and the socket is read on
// until the server's close frame comes back (at most CloseGrace), so a
// callback the server sent before it saw ours is read, not lost in the
// socket; every callback read is handed to the Handler, and a frame
// written before Close gets the ack read meanwhile (its Wait waits for it
// until the handshake ends).
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
// no-ops (they wait for the first to finish).
func (c *Conn) shut(reason CloseReason, cause error) {
	c.end.once.Do(func() {
		c.end.begin(reason, cause)
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

// closeErr waits for the connection to start closing and returns why.
func (c *Conn) closeErr() error {
	<-c.end.closing
	return c.Err()
}

// read owns the socket's read side; when it ends the connection is over.
// Acks are handled here, on the reader itself, so they never wait behind
// callbacks; callbacks go to the bounded queue the dispatcher drains.
func (c *Conn) read() {
	defer func() {
		close(c.end.readEnded)
		_ = c.ws.Close() // already, unless Close's handshake ended here
		c.callbacks.readerStopped()
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
			at := time.Now()
			c.vitals.callback.Store(at.UnixNano())
			c.vitals.callbacks.Add(1)
			c.routes.heard(RouteOf(f.Body), at)
			if !c.callbacks.push(&f) {
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

func (c *Conn) heartbeat() {
	defer c.wg.Done()
	t := clock.Or(c.cfg.Clock).NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-c.end.closing:
			return
		case <-t.C():
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
	if c.end.closed.Load() {
		return c.closeErr()
	}
	c.ws.SetWriteDeadline(time.Now().Add(c.cfg.AckTimeout))
	if err := c.ws.WriteMessage(websocket.TextMessage, raw); err != nil {
		c.shut(ReasonNetwork, err)
		return c.closeErr()
	}
	return nil
}
