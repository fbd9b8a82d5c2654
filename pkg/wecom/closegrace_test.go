package wecom_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
)

// A server that never answers the client's close frame: Close's handshake
// gives up after CloseGrace and the connection ends (Done) all the same,
// and a callback the server wrote after it saw the close is still handed
// to the handler. The simulator always answers the close, so this server
// is a few lines of its own: it acknowledges the subscription, and on the
// client's close frame writes one more callback and then reads on without
// ever closing.
func TestCloseWithoutTheServersAnswerEndsAfterTheGrace(t *testing.T) {
	sawClose := make(chan struct{})
	release := make(chan struct{}) // the test is done with the server
	serverDone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(serverDone)
		ws := subscribed(w, r)
		if ws == nil {
			return
		}
		defer ws.Close()
		ws.SetCloseHandler(func(int, string) error {
			body, _ := json.Marshal(wecom.MsgCallback{MsgID: "after-close", MsgType: "text"})
			_ = ws.WriteJSON(wecom.Frame{Cmd: wecom.CmdMsgCallback, Headers: wecom.Headers{ReqID: "r-after"}, Body: body})
			close(sawClose)
			return nil // no close frame back: the handshake is never completed
		})
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				// The close frame ends gorilla's reads; hold the socket
				// open, silent, until the test is done (a hijacked
				// request's context is not ended by the server's Close).
				<-release
				return
			}
		}
	}))
	defer func() { close(release); <-serverDone; srv.Close() }()
	got := make(chan string, 1)
	c, err := wecom.Dial(context.Background(),
		wecom.Config{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/", BotID: "b", Secret: "s", Logger: zerolog.Nop()},
		wecom.MessageFunc(func(_ *wecom.Conn, _ string, m *wecom.MsgCallback) { got <- m.MsgID }))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.Close()
	select {
	case <-sawClose:
	case <-time.After(waitLong):
		t.Fatal("the server never saw the close frame")
	}
	select {
	case <-c.Done():
	case <-time.After(waitLong):
		t.Fatalf("not done %s after Close although the grace is %s", waitLong, wecom.CloseGrace)
	}
	if took := time.Since(start); took < wecom.CloseGrace*9/10 {
		t.Fatalf("done %s after Close: the handshake was not waited for (grace %s)", took, wecom.CloseGrace)
	}
	select {
	case id := <-got:
		if id != "after-close" {
			t.Fatalf("handler got %q", id)
		}
	default:
		t.Fatal("the callback written after the server saw the close was not handed over")
	}
	if c.Reason() != wecom.ReasonClosedByUs {
		t.Fatalf("reason %s", c.Reason())
	}
}
