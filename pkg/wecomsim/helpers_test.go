package wecomsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
	"github.com/gorilla/websocket"
)

// wait is how long a test waits for an event that should happen: generous,
// the CI box is a loaded 2-core machine (the ack of a 14 MB frame, parsed,
// base64-decoded and hashed under the race detector, took over 10 s there
// beside other test binaries). Events are awaited, never slept for, so a
// passing test never waits this long.
const wait = 60 * time.Second

// quiet is how long a test watches for a frame that must NOT come.
const quiet = 300 * time.Millisecond

// fakeClock is the injected clock: tests move time instead of sleeping.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type harness struct {
	t     *testing.T
	srv   *Server
	ts    *httptest.Server
	clock *fakeClock
	mu    sync.Mutex
	conns []*client
}

const (
	bot1, secret1 = "bot1", "secret-1"
	bot2, secret2 = "bot2", "secret-2"
)

// newSim starts a server with bot1 and bot2. If cfg.Now is nil, a fake
// clock is injected (h.clock). Call h.close() before goleak checks.
func newSim(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t}
	if cfg.Now == nil {
		h.clock = newFakeClock()
		cfg.Now = h.clock.Now
	}
	h.srv = New(cfg)
	if err := h.srv.AddBot(bot1, secret1); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.AddBot(bot2, secret2); err != nil {
		t.Fatal(err)
	}
	h.ts = httptest.NewServer(h.srv.Handler())
	return h
}

func (h *harness) close() {
	h.mu.Lock()
	conns := h.conns
	h.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	h.srv.Close()
	h.ts.Close()
}

// client is a raw WebSocket client: a reader goroutine feeds frames into a
// channel; acks and callbacks are told apart by cmd.
type client struct {
	t       *testing.T
	ws      *websocket.Conn
	in      chan wecom.Frame
	done    chan struct{}
	errMu   sync.Mutex
	readErr error
	held    []wecom.Frame // frames read while looking for another one
	n       int
}

func (h *harness) dial() *client {
	h.t.Helper()
	url := "ws" + strings.TrimPrefix(h.ts.URL, "http") + "/"
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		h.t.Fatalf("dial: %v", err)
	}
	c := &client{t: h.t, ws: ws, in: make(chan wecom.Frame, 1024), done: make(chan struct{})}
	go c.readLoop()
	h.mu.Lock()
	h.conns = append(h.conns, c)
	h.mu.Unlock()
	return c
}

// subscribe dials and subscribes, failing the test unless the ack is 0.
func (h *harness) subscribe(botID, secret string) *client {
	h.t.Helper()
	c := h.dial()
	a := c.call(wecom.CmdSubscribe, "", wecom.SubscribeBody{BotID: botID, Secret: secret})
	wantCode(h.t, a, 0)
	return c
}

func (c *client) readLoop() {
	defer close(c.done)
	defer close(c.in)
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			c.errMu.Lock()
			c.readErr = err
			c.errMu.Unlock()
			return
		}
		var f wecom.Frame
		if err := json.Unmarshal(data, &f); err != nil {
			c.t.Errorf("server sent invalid JSON %q: %v", data, err)
			continue
		}
		c.in <- f
	}
}

func (c *client) close() {
	c.ws.Close()
	<-c.done
}

func (c *client) sendRaw(mt int, data []byte) {
	c.t.Helper()
	if err := c.ws.WriteMessage(mt, data); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// send writes a frame; an empty reqID gets a fresh one, which it returns.
func (c *client) send(cmd, reqID string, body any) string {
	c.t.Helper()
	if reqID == "" {
		c.n++
		reqID = cmd + "_" + time.Now().Format("150405.000000") + "_" + string(rune('a'+c.n%26)) + strings.Repeat("x", c.n/26)
	}
	f := wecom.Frame{Cmd: cmd, Headers: wecom.Headers{ReqID: reqID}}
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		f.Body = raw
	}
	data, _ := json.Marshal(f)
	c.sendRaw(websocket.TextMessage, data)
	return reqID
}

// call sends a frame and waits for its ack.
func (c *client) call(cmd, reqID string, body any) wecom.Frame {
	c.t.Helper()
	return c.ack(c.send(cmd, reqID, body))
}

// next returns the first frame (held or new) that match accepts.
func (c *client) next(what string, match func(wecom.Frame) bool) wecom.Frame {
	c.t.Helper()
	for i, f := range c.held {
		if match(f) {
			c.held = append(c.held[:i:i], c.held[i+1:]...)
			return f
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case f, open := <-c.in:
			if !open {
				c.t.Fatalf("connection closed (%v) while waiting for %s", c.err(), what)
			}
			if match(f) {
				return f
			}
			c.held = append(c.held, f)
		case <-timer.C:
			c.t.Fatalf("no %s within %v (held: %+v)", what, wait, c.held)
		}
	}
}

func (c *client) ack(reqID string) wecom.Frame {
	c.t.Helper()
	return c.next("ack for "+reqID, func(f wecom.Frame) bool { return f.IsAck() && f.Headers.ReqID == reqID })
}

func (c *client) callback(cmd string) wecom.Frame {
	c.t.Helper()
	return c.next(cmd, func(f wecom.Frame) bool { return f.Cmd == cmd })
}

// msgCallback waits for an aibot_msg_callback and decodes it.
func (c *client) msgCallback() (string, wecom.MsgCallback) {
	c.t.Helper()
	f := c.callback(wecom.CmdMsgCallback)
	var m wecom.MsgCallback
	if err := json.Unmarshal(f.Body, &m); err != nil {
		c.t.Fatal(err)
	}
	return f.Headers.ReqID, m
}

// eventCallback waits for an aibot_event_callback and decodes it.
func (c *client) eventCallback() (string, wecom.EventCallback) {
	c.t.Helper()
	f := c.callback(wecom.CmdEventCallback)
	var e wecom.EventCallback
	if err := json.Unmarshal(f.Body, &e); err != nil {
		c.t.Fatal(err)
	}
	return f.Headers.ReqID, e
}

// closed waits until the server closes the connection and returns the
// read error (a *websocket.CloseError when a close frame came).
func (c *client) closed() error {
	c.t.Helper()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case f, open := <-c.in:
			if !open {
				return c.err()
			}
			c.held = append(c.held, f)
		case <-timer.C:
			c.t.Fatalf("connection still open after %v", wait)
		}
	}
}

// silent asserts that no frame arrives for a short while (negative checks
// cannot wait for an event).
func (c *client) silent() {
	c.t.Helper()
	select {
	case f, open := <-c.in:
		if open {
			c.t.Fatalf("unexpected frame %+v", f)
		}
	case <-time.After(quiet):
	}
}

func (c *client) err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.readErr
}

func wantCode(t *testing.T, f wecom.Frame, code int) {
	t.Helper()
	if !f.IsAck() {
		t.Fatalf("want an ack, got %+v", f)
	}
	if f.ErrCode != code {
		t.Fatalf("req_id %s: errcode %d (%s), want %d", f.Headers.ReqID, f.ErrCode, f.ErrMsg, code)
	}
}

func wantCloseCode(t *testing.T, err error, code int) {
	t.Helper()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != code {
		t.Fatalf("want close %d, got %v", code, err)
	}
}

// post plays a user message and fails the test on error.
func (h *harness) post(req MessageRequest) MessageResult {
	h.t.Helper()
	res, err := h.srv.PostMessage(req)
	if err != nil {
		h.t.Fatalf("PostMessage: %v", err)
	}
	return res
}

func (h *harness) event(req EventRequest) EventResult {
	h.t.Helper()
	res, err := h.srv.PostEvent(req)
	if err != nil {
		h.t.Fatalf("PostEvent: %v", err)
	}
	return res
}

func (h *harness) stats(botID string) Stats {
	h.t.Helper()
	st, err := h.srv.Stats(botID)
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

// askAndReceive posts a message from user to bot1 and returns the callback's
// req_id as c received it.
func (h *harness) askAndReceive(c *client, user, text string) (string, wecom.MsgCallback) {
	h.t.Helper()
	res := h.post(MessageRequest{BotID: bot1, UserID: user, Text: text})
	if !res.Delivered {
		h.t.Fatalf("message not delivered: %+v", res)
	}
	reqID, m := c.msgCallback()
	if reqID != res.ReqID || m.MsgID != res.MsgID {
		h.t.Fatalf("callback req_id/msgid %s/%s, control API said %s/%s", reqID, m.MsgID, res.ReqID, res.MsgID)
	}
	return reqID, m
}

func streamBody(id, content string, finish bool) wecom.RespondBody {
	return wecom.RespondBody{MsgType: wecom.MsgTypeStream, Stream: &wecom.Stream{ID: id, Content: content, Finish: finish}}
}

// httpDo calls the control API and decodes the JSON answer into a generic
// map, so tests check the exact field names.
func (h *harness) httpDo(method, path string, body any) (int, map[string]any) {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, h.ts.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		h.t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		h.t.Fatalf("%s %s: answer is not a JSON object: %v", method, path, err)
	}
	return resp.StatusCode, out
}

// waitFor polls cond until it holds (for state that has no event to await,
// such as a counter updated after the peer already saw the close).
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out after %v waiting for %s", wait, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
