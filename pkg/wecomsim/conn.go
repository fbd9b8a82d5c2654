package wecomsim

import (
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"
)

const writeTimeout = 10 * time.Second

// outFrame is one thing the writer sends: a text frame, or a close frame
// after which the writer closes the socket.
type outFrame struct {
	data      []byte
	close     bool
	closeCode int
	closeText string
	rec       *callbackRec // set when recording: recorded once written
	written   frameWritten // if set, told once the frame is written
}

// conn is one WebSocket. Its read loop runs in the HTTP handler goroutine;
// a single writer goroutine owns every write (gorilla allows one writer),
// fed by an unbounded queue so that enqueueing never blocks a bot's lock.
type conn struct {
	s   *Server
	id  uint64
	ws  *websocket.Conn
	log zerolog.Logger
	// base is the scheme and host the client dialed: media URLs point there.
	base string

	// bot is the bot this connection subscribed as (nil before). Only the
	// read loop touches it. Whether the subscription is still live is
	// bot.live == c, under bot.mu.
	bot *bot

	mu      sync.Mutex
	queue   []outFrame
	closing bool // a close is queued or done: enqueue refuses more
	// goodbye: the client closed first; its close is answered after the
	// frames queued before it (flushed, not dropped).
	goodbye bool
	wake    chan struct{}
	done    chan struct{} // closed when the read loop ends

	// Acks held back by the late_acks fault, in the order they were
	// decided; lateLoop queues each one for writing when it is due.
	lateMu   sync.Mutex
	late     []lateAck
	lateWake chan struct{}
}

// lateAck is an ack the late_acks fault holds back until due (wall clock).
type lateAck struct {
	due   time.Time
	frame outFrame
}

// frameWritten hears that a frame it rode on was written to the socket
// (an upload's chunk ack: the chunk is no longer in flight).
type frameWritten interface {
	written()
}

func newConn(s *Server, id uint64, ws *websocket.Conn) *conn {
	return &conn{
		s:        s,
		id:       id,
		ws:       ws,
		log:      s.log.With().Uint64("conn", id).Str("remote", ws.RemoteAddr().String()).Logger(),
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		lateWake: make(chan struct{}, 1),
	}
}

// holdAck queues an ack to be written after delay. Acks keep their order:
// one fault's delay is the same for all, and a shorter delay set later
// never lets an ack overtake one held before it.
func (c *conn) holdAck(data []byte, delay time.Duration, written frameWritten) {
	c.lateMu.Lock()
	due := clock.Or(c.s.cfg.Clock).Now().Add(delay)
	if n := len(c.late); n > 0 && due.Before(c.late[n-1].due) {
		due = c.late[n-1].due
	}
	c.late = append(c.late, lateAck{due: due, frame: outFrame{data: data, written: written}})
	c.lateMu.Unlock()
	select {
	case c.lateWake <- struct{}{}:
	default:
	}
}

// lateLoop writes held-back acks when they are due; it ends with the read
// loop (acks still held are dropped with the connection).
func (c *conn) lateLoop(stopped chan<- struct{}) {
	defer close(stopped)
	for {
		c.lateMu.Lock()
		var next lateAck
		if len(c.late) > 0 {
			next = c.late[0]
		}
		c.lateMu.Unlock()
		if next.frame.data == nil {
			select {
			case <-c.lateWake:
				continue
			case <-c.done:
				return
			}
		}
		if wait := next.due.Sub(clock.Or(c.s.cfg.Clock).Now()); wait > 0 {
			t := clock.Or(c.s.cfg.Clock).NewTimer(wait)
			select {
			case <-t.C():
			case <-c.done:
				t.Stop()
				return
			}
		}
		c.lateMu.Lock()
		c.late[0] = lateAck{}
		c.late = c.late[1:]
		c.lateMu.Unlock()
		// Counted before the push: a client that has read the ack finds it
		// in the stats (counted after, a stats read could miss it).
		c.count(func(st *counters) { st.LateAcks++ })
		if !c.push(next.frame) {
			c.count(func(st *counters) { st.LateAcks-- }) // dropped with the connection
		}
	}
}

// enqueue queues a text frame; false if the connection is closing.
func (c *conn) enqueue(data []byte) bool {
	return c.push(outFrame{data: data})
}

// enqueueClose queues a close frame: frames queued before it are written
// first, nothing queued after it is. False if a close was queued or done
// already.
func (c *conn) enqueueClose(code int, text string) bool {
	return c.push(outFrame{close: true, closeCode: code, closeText: text})
}

func (c *conn) push(f outFrame) bool {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return false
	}
	if f.close {
		c.closing = true
	}
	c.queue = append(c.queue, f)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return true
}

// hangUp ends the subscription now (no callback is delivered here any more)
// and queues a close frame after the frames already queued (false: one
// was queued or done already). Read loop only.
func (c *conn) hangUp(code int, text string) bool {
	if b := c.bot; b != nil {
		b.mu.Lock()
		if b.live == c {
			b.live = nil
		}
		b.mu.Unlock()
	}
	return c.enqueueClose(code, text)
}

// abort closes the socket at once, without a close frame: a network drop.
func (c *conn) abort() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.ws.Close()
}

// shutdown is Server.Close's goodbye: a best-effort "going away" close frame,
// then the socket is closed.
func (c *conn) shutdown() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	_ = c.ws.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseGoingAway, "simulator shutting down"),
		time.Now().Add(500*time.Millisecond))
	c.ws.Close()
}

func (c *conn) writeLoop(stopped chan<- struct{}) {
	defer close(stopped)
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		for {
			c.mu.Lock()
			if len(c.queue) == 0 {
				c.mu.Unlock()
				break
			}
			f := c.queue[0]
			c.queue[0] = outFrame{}
			c.queue = c.queue[1:]
			c.mu.Unlock()
			if f.close {
				_ = c.ws.WriteControl(websocket.CloseMessage,
					websocket.FormatCloseMessage(f.closeCode, f.closeText),
					time.Now().Add(time.Second))
				c.ws.Close()
				return
			}
			// A callback is recorded before its write starts: the client
			// may read it and reply before this goroutine runs again, and
			// the reply's event must come after the callback's.
			if f.rec != nil {
				f.rec.ev.At = c.s.now()
				c.s.rec.add(f.rec.bot, f.rec.ev)
			}
			_ = c.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
			if err := c.ws.WriteMessage(websocket.TextMessage, f.data); err != nil {
				if f.rec != nil {
					c.s.rec.retract(f.rec.bot, f.rec.ev)
				}
				c.log.Debug().Err(err).Msg("write failed, closing")
				c.abort()
				return
			}
			if f.written != nil {
				f.written.written()
			}
		}
	}
}

// run reads frames until the socket ends, then releases the subscription.
func (c *conn) run() {
	c.log.Debug().Msg("connected")
	c.ws.SetReadLimit(int64(c.s.cfg.MaxFrameBytes))
	// The client's close frame: nothing more is delivered here, what was
	// queued (callbacks counted as delivered, acks) is written, then the
	// close is answered. The client reads until that answer.
	c.ws.SetCloseHandler(func(code int, _ string) error {
		if c.hangUp(websocket.CloseNormalClosure, "") {
			c.mu.Lock()
			c.goodbye = true
			c.mu.Unlock()
		}
		return nil
	})
	stopped, lateStopped := make(chan struct{}), make(chan struct{})
	go c.writeLoop(stopped)
	go c.lateLoop(lateStopped)
	defer func() {
		// Refuse new frames first, so no callback counts as delivered once
		// the socket is gone, then release the subscription.
		c.mu.Lock()
		c.closing = true
		goodbye := c.goodbye
		c.mu.Unlock()
		if b := c.bot; b != nil {
			b.mu.Lock()
			if b.live == c {
				b.live = nil
			}
			b.mu.Unlock()
		}
		if goodbye {
			// The queue ends with the close's answer: the writer stops
			// after it (bounded by its write deadline).
			<-stopped
		}
		close(c.done)
		c.ws.Close()
		<-stopped
		<-lateStopped
		c.log.Debug().Msg("disconnected")
	}()
	for {
		mt, data, err := c.ws.ReadMessage()
		if err != nil {
			if errors.Is(err, websocket.ErrReadLimit) {
				// gorilla has already sent close 1009.
				c.count(func(st *counters) { st.Oversized++ })
				c.log.Warn().Int("limit", c.s.cfg.MaxFrameBytes).Msg("frame over the size limit: connection closed with 1009")
			}
			return
		}
		if mt != websocket.TextMessage {
			c.count(func(st *counters) { st.Malformed++ })
			c.ack("", wecom.ErrCodeInvalidParam, "binary frames are not supported: send JSON text frames", nil)
			c.hangUp(websocket.CloseUnsupportedData, "binary frames are not supported")
			continue
		}
		c.handle(data)
	}
}

// count updates the counters of the bot this connection subscribed as, if any.
func (c *conn) count(f func(*counters)) {
	if b := c.bot; b != nil {
		b.mu.Lock()
		f(&b.stats)
		b.mu.Unlock()
	}
}

// ack answers a client frame on behalf of the connection's bot.
func (c *conn) ack(reqID string, code int, msg string, body any) {
	c.ackFor(c.bot, reqID, code, msg, body, nil)
}

// ackFor answers a client frame attributed to bot b (nil if unknown): the
// errcode is counted in b's stats, nothing is sent while b's acks are
// stalled by a fault, and the ack is held back while b's acks are late.
func (c *conn) ackFor(b *bot, reqID string, code int, msg string, body any, written frameWritten) {
	var delay time.Duration
	if b != nil {
		b.mu.Lock()
		if code != 0 {
			b.stats.Errors[code]++
		}
		now := c.s.now()
		stalled := now.Before(b.stallUntil)
		if now.Before(b.lateUntil) {
			delay = b.lateDelay
		}
		b.mu.Unlock()
		if stalled {
			return
		}
	}
	if code == 0 {
		msg = "ok"
	} else {
		c.log.Debug().Str("req_id", reqID).Int("errcode", code).Str("errmsg", msg).Msg("frame rejected")
	}
	a := wecom.Ack{Headers: wecom.Headers{ReqID: reqID}, ErrCode: code, ErrMsg: msg}
	if body != nil {
		raw, err := json.Marshal(body)
		if err == nil {
			a.Body = raw
		}
	}
	data, err := json.Marshal(a)
	if err != nil {
		return
	}
	if delay > 0 {
		c.holdAck(data, delay, written)
		return
	}
	c.push(outFrame{data: data, written: written})
}

// knownCmds are the commands a client may send.
var knownCmds = map[string]bool{
	wecom.CmdSubscribe:         true,
	wecom.CmdPing:              true,
	wecom.CmdRespondMsg:        true,
	wecom.CmdRespondWelcomeMsg: true,
	wecom.CmdRespondUpdateMsg:  true,
	wecom.CmdEnterEventReply:   true,
	wecom.CmdSendMsg:           true,
	wecom.CmdUploadMediaInit:   true,
	wecom.CmdUploadMediaChunk:  true,
	wecom.CmdUploadMediaFinish: true,
	CmdGetMCPConfig:            true,
}

func (c *conn) handle(data []byte) {
	var f wecom.Frame
	if err := json.Unmarshal(data, &f); err != nil {
		c.count(func(st *counters) { st.Malformed++; st.Frames["malformed"]++ })
		c.ack("", wecom.ErrCodeInvalidParam, "frame is not valid JSON: send {\"cmd\":…,\"headers\":{\"req_id\":…},\"body\":{…}}", nil)
		return
	}
	cmd := f.Cmd
	if !knownCmds[cmd] {
		c.count(func(st *counters) { st.Malformed++; st.Frames["unknown"]++ })
		c.ack(f.Headers.ReqID, wecom.ErrCodeInvalidParam, "unknown cmd "+quote(cmd), nil)
		return
	}
	if cmd == wecom.CmdSubscribe {
		c.subscribe(&f)
		return
	}
	c.count(func(st *counters) { st.Frames[cmd]++ })
	if f.Headers.ReqID == "" {
		c.count(func(st *counters) { st.Malformed++ })
		c.ack("", wecom.ErrCodeInvalidParam, cmd+": headers.req_id is required", nil)
		return
	}
	b := c.bot
	if b == nil {
		c.ack(f.Headers.ReqID, wecom.ErrCodeNotSubscribed, "aibot websocket not subscribed: send aibot_subscribe first", nil)
		return
	}
	switch cmd {
	case wecom.CmdPing:
		c.ping(b, &f)
	case wecom.CmdRespondMsg:
		c.respondMsg(b, &f)
	case wecom.CmdRespondWelcomeMsg:
		c.respondWelcome(b, &f)
	case wecom.CmdRespondUpdateMsg:
		c.respondUpdate(b, &f)
	case wecom.CmdEnterEventReply:
		c.apply(b, &f, c.enterEventReplyLocked, nil)
	case wecom.CmdSendMsg:
		c.sendMsg(b, &f)
	case wecom.CmdUploadMediaInit, wecom.CmdUploadMediaChunk, wecom.CmdUploadMediaFinish:
		c.upload(b, &f)
	case CmdGetMCPConfig:
		c.mcpConfig(b, &f) // mcp.go
	}
}

func (c *conn) subscribe(f *wecom.Frame) {
	var body wecom.SubscribeBody
	if err := decodeBody(f.Body, &body); err != nil || body.BotID == "" {
		c.count(func(st *counters) { st.Frames[wecom.CmdSubscribe]++; st.Malformed++ })
		c.ack(f.Headers.ReqID, wecom.ErrCodeInvalidParam, "aibot_subscribe: body must be {\"bot_id\":…,\"secret\":…}", nil)
		return
	}
	if f.Headers.ReqID == "" {
		c.count(func(st *counters) { st.Frames[wecom.CmdSubscribe]++; st.Malformed++ })
		c.ack("", wecom.ErrCodeInvalidParam, "aibot_subscribe: headers.req_id is required", nil)
		return
	}
	log := c.log.With().Str("bot", body.BotID).Str("req_id", f.Headers.ReqID).Logger()
	b, err := c.s.bot(body.BotID)
	if err != nil {
		log.Warn().Msg("subscribe refused: unknown bot")
		c.ack(f.Headers.ReqID, wecom.ErrCodeInvalidCredential, "invalid credential: unknown bot_id or wrong secret", nil)
		c.hangUp(websocket.ClosePolicyViolation, "authentication failed")
		return
	}
	if c.bot != nil && c.bot != b {
		c.count(func(st *counters) { st.Frames[wecom.CmdSubscribe]++ })
		c.ackFor(b, f.Headers.ReqID, wecom.ErrCodeInvalidParam, "this connection is already subscribed as bot "+c.bot.id+": open one connection per bot", nil, nil)
		return
	}
	now := c.s.now()
	b.mu.Lock()
	b.stats.Frames[wecom.CmdSubscribe]++
	if body.Secret != b.secret || b.revoked {
		b.stats.AuthFailures++
		b.mu.Unlock()
		log.Warn().Msg("subscribe refused: wrong or revoked secret")
		c.ackFor(b, f.Headers.ReqID, wecom.ErrCodeInvalidCredential, "invalid credential: unknown bot_id or wrong secret", nil, nil)
		c.hangUp(websocket.ClosePolicyViolation, "authentication failed")
		return
	}
	if now.Before(b.refuseUntil) {
		code := b.refuseCode
		b.stats.SubRefusals++
		b.mu.Unlock()
		log.Warn().Int("errcode", code).Msg("subscribe refused by the refuse_subscribe fault")
		c.ackFor(b, f.Headers.ReqID, code, "subscribe refused, try again later (refuse_subscribe fault)", nil, nil)
		c.hangUp(websocket.CloseTryAgainLater, "subscribe refused, try again later")
		return
	}
	c.bot = b
	old := b.live
	b.live = c
	b.stats.Connections++
	if old != nil && old != c {
		b.stats.Kicks++
		ev := wecom.EventCallback{
			MsgID:      newID("msg"),
			CreateTime: now.Unix(),
			AIBotID:    b.id,
			MsgType:    wecom.MsgTypeEvent,
			Event:      wecom.Event{EventType: wecom.EventDisconnected},
		}
		if data, err := callbackFrame(wecom.CmdEventCallback, newReqID(wecom.CmdEventCallback, now), ev); err == nil {
			old.enqueue(data)
		}
		old.enqueueClose(websocket.CloseNormalClosure, "another connection subscribed as this bot")
		log.Info().Uint64("old_conn", old.id).Msg("kicked the old connection: a new one subscribed")
	}
	// The ack is queued before the lock is released: no callback can reach
	// the new connection ahead of its subscribe ack (as WeCom: callbacks
	// follow a successful subscribe).
	if !now.Before(b.stallUntil) {
		if data, err := json.Marshal(wecom.Ack{Headers: wecom.Headers{ReqID: f.Headers.ReqID}, ErrCode: wecom.ErrCodeOK, ErrMsg: "ok"}); err == nil {
			c.enqueue(data)
		}
	}
	b.mu.Unlock()
	log.Info().Msg("subscribed")
}

func (c *conn) ping(b *bot, f *wecom.Frame) {
	b.mu.Lock()
	live := b.live == c
	if !live {
		b.stats.NotSubscribed++
	}
	b.mu.Unlock()
	if !live {
		c.ack(f.Headers.ReqID, wecom.ErrCodeNotSubscribed, "aibot websocket not subscribed: this connection was replaced or dropped; reconnect and subscribe", nil)
		return
	}
	c.ack(f.Headers.ReqID, wecom.ErrCodeOK, "", nil)
}

func decodeBody(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return errors.New("body is required")
	}
	return json.Unmarshal(raw, v)
}

func callbackFrame(cmd, reqID string, body any) ([]byte, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return json.Marshal(wecom.Frame{Cmd: cmd, Headers: wecom.Headers{ReqID: reqID}, Body: raw})
}

func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	b, _ := json.Marshal(s)
	return string(b)
}
