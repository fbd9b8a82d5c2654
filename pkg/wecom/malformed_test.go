package wecom_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"
)

// rawServer is a WeCom server of a few lines, for frames the simulator

// subscribed upgrades a test server's request to a WebSocket and
// acknowledges the client's subscribe, as WeCom does; nil if the client
// did not subscribe. The caller closes it.
func subscribed(w http.ResponseWriter, r *http.Request) *websocket.Conn {
	ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
	if err != nil {
		return nil
	}
	var sub wecom.Frame
	if err := ws.ReadJSON(&sub); err != nil || sub.Cmd != wecom.CmdSubscribe || ws.WriteJSON(wecom.Ack{Headers: sub.Headers}) != nil {
		ws.Close()
		return nil
	}
	return ws
}

// never writes: it acknowledges the subscription, then writes each of
// frames (text messages, or binary ones for a []byte) and holds the
// socket open, reading, until the test ends.
func rawServer(t *testing.T, frames ...any) string {
	t.Helper()
	release := make(chan struct{})
	var handlers sync.WaitGroup // the handlers that started; none if no client connected
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlers.Add(1)
		defer handlers.Done()
		ws := subscribed(w, r)
		if ws == nil {
			return
		}
		defer ws.Close()
		for _, f := range frames {
			var err error
			switch f := f.(type) {
			case []byte:
				err = ws.WriteMessage(websocket.BinaryMessage, f)
			case string:
				err = ws.WriteMessage(websocket.TextMessage, []byte(f))
			}
			if err != nil {
				return
			}
		}
		go func() { // answer pings and the close handshake while held open
			for {
				var f wecom.Frame
				if ws.ReadJSON(&f) != nil {
					return
				}
				if f.Cmd == wecom.CmdPing {
					ws.WriteJSON(wecom.Ack{Headers: f.Headers})
				}
			}
		}()
		<-release
	}))
	// srv.Close returns once each request has ended or been hijacked (after
	// its handler's Add), so handlers.Wait waits only for handlers that ran.
	t.Cleanup(func() { close(release); srv.Close(); handlers.Wait() })
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/"
}

// callbackFrame is an aibot_msg_callback frame of a text message.
func callbackFrame(reqID, msgid string) string {
	body, _ := json.Marshal(wecom.MsgCallback{MsgID: msgid, MsgType: wecom.MsgTypeText, From: wecom.From{UserID: "u"},
		Text: &wecom.TextContent{Content: "hello"}})
	raw, _ := json.Marshal(wecom.Frame{Cmd: wecom.CmdMsgCallback, Headers: wecom.Headers{ReqID: reqID}, Body: body})
	return string(raw)
}

// Frames the server should never write are ignored, one by one: not JSON,
// binary, an unknown cmd, an ack of a req_id never sent, callbacks whose
// body is not an object. The connection holds, and the good callback
// after them is handed to the handler, alone and once.
func TestMalformedFramesAreIgnoredAndTheConnectionHolds(t *testing.T) {
	url := rawServer(t,
		"not json at all",
		[]byte{0xff, 0x00, 0x01},
		`{"cmd": "aibot_future_cmd", "headers": {"req_id": "r-1"}, "body": {}}`,
		`{"headers": {"req_id": "never-sent"}, "errcode": 0, "errmsg": "ok"}`,
		`{"cmd": "aibot_msg_callback", "headers": {"req_id": "r-2"}, "body": "a string"}`,
		`{"cmd": "aibot_msg_callback", "headers": {"req_id": "r-3"}, "body": [1, 2]}`,
		`{"cmd": "aibot_event_callback", "headers": {"req_id": "r-4"}, "body": {"event": "not an object"}}`,
		`{"cmd": "aibot_msg_callback", "headers": {"req_id": "r-5"}, "body": {"msgid": 7}}`,
		callbackFrame("r-good", "good"),
	)
	got := make(chan string, 16)
	events := make(chan string, 16)
	h := handlerFuncs{
		msg: func(_ *wecom.Conn, reqID string, m *wecom.MsgCallback) { got <- reqID + " " + m.MsgID },
		ev:  func(_ *wecom.Conn, reqID string, _ *wecom.EventCallback) { events <- reqID },
	}
	c, err := wecom.Dial(context.Background(), wecom.Config{URL: url, BotID: "b", Secret: "s", Logger: zerolog.Nop(),
		HeartbeatInterval: 200 * time.Millisecond}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { c.Close(); <-c.Done() }()
	select {
	case m := <-got:
		if m != "r-good good" {
			t.Fatalf("the handler got %q, want only the good callback", m)
		}
	case <-time.After(waitLong):
		t.Fatal("the good callback after the malformed frames never reached the handler")
	}
	// Heartbeats go on over it: the connection is not on its way out.
	time.Sleep(time.Second)
	select {
	case <-c.Done():
		t.Fatalf("the connection ended: %s %v", c.Reason(), c.Err())
	default:
	}
	select {
	case m := <-got:
		t.Fatalf("a second message reached the handler: %q", m)
	case e := <-events:
		t.Fatalf("a malformed event reached the handler: %q", e)
	default:
	}
}

// A frame over the read limit (4 × MaxFrameBytes; WeCom's callbacks are
// tens of KB) cannot be skipped: the connection ends, for a network
// reason, and the callback before it was handed over.
func TestAFrameOverTheReadLimitEndsTheConnection(t *testing.T) {
	huge := `{"cmd": "aibot_msg_callback", "headers": {"req_id": "r-huge"}, "body": {"msgid": "huge", "text": {"content": "` +
		strings.Repeat("x", 4*wecom.MaxFrameBytes) + `"}}}`
	url := rawServer(t, callbackFrame("r-1", "before"), huge)
	got := make(chan string, 4)
	c, err := wecom.Dial(context.Background(), wecom.Config{URL: url, BotID: "b", Secret: "s", Logger: zerolog.Nop()},
		wecom.MessageFunc(func(_ *wecom.Conn, _ string, m *wecom.MsgCallback) { got <- m.MsgID }))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { c.Close(); <-c.Done() }()
	waitDone(t, c)
	if c.Reason() != wecom.ReasonNetwork {
		t.Fatalf("reason %s (%v), want network", c.Reason(), c.Err())
	}
	select {
	case id := <-got:
		if id != "before" {
			t.Fatalf("handler got %q", id)
		}
	default:
		t.Fatal("the callback before the huge frame was not handed over")
	}
}

// handlerFuncs is a wecom.Handler of two funcs.
type handlerFuncs struct {
	msg func(*wecom.Conn, string, *wecom.MsgCallback)
	ev  func(*wecom.Conn, string, *wecom.EventCallback)
}

func (h handlerFuncs) Message(c *wecom.Conn, reqID string, m *wecom.MsgCallback)  { h.msg(c, reqID, m) }
func (h handlerFuncs) Event(c *wecom.Conn, reqID string, ev *wecom.EventCallback) { h.ev(c, reqID, ev) }
