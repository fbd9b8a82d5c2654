package wecom_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"
)

// ackOnCloseServer acknowledges the subscription, then holds back the ack
// of the next frame until it reads the client's close frame; then it
// writes that ack (when ackIt) and completes the closing handshake.
func ackOnCloseServer(t *testing.T, ackIt bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws := subscribed(w, r)
		if ws == nil {
			return
		}
		defer ws.Close()
		var held *wecom.Headers
		ws.SetCloseHandler(func(code int, _ string) error {
			if held != nil && ackIt {
				_ = ws.WriteJSON(wecom.Ack{Headers: *held})
			}
			return ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""), time.Now().Add(time.Second))
		})
		for {
			var f wecom.Frame
			if err := ws.ReadJSON(&f); err != nil {
				return
			}
			if f.Cmd != wecom.CmdPing && held == nil {
				held = &f.Headers
			}
		}
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/"
}

// A frame written before Close gets the ack the server sends before it
// answers the close: the caller learns it was applied, not that the
// connection closed (a reply told "closed" is owed again, and shown twice).
func TestAckReadDuringClosesHandshakeSettlesTheFrame(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ackIt bool
	}{{"acked before the server's close", true}, {"no ack before the server's close", false}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := wecom.Dial(context.Background(),
				wecom.Config{URL: ackOnCloseServer(t, tc.ackIt), BotID: "b", Secret: "s", Logger: zerolog.Nop()},
				wecom.MessageFunc(func(*wecom.Conn, string, *wecom.MsgCallback) {}))
			if err != nil {
				t.Fatal(err)
			}
			p, err := c.SendStream(context.Background(), "req-1", wecom.Stream{ID: "s1", Content: "hi", Finish: true})
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			_, err = p.Wait(ctx)
			switch {
			case tc.ackIt && err != nil:
				t.Fatalf("Wait = %v, want the ack read during the handshake", err)
			case !tc.ackIt && !errors.Is(err, wecom.ErrClosed):
				t.Fatalf("Wait = %v, want ErrClosed: the handshake ended without the ack", err)
			}
			select {
			case <-c.Done():
			case <-time.After(waitLong):
				t.Fatal("connection not done after its handshake")
			}
		})
	}
}
