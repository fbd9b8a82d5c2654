package backfill_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
)

// wecomRig is the simulator with bot b1 and a real connection of b1 to it,
// handed to a WeComHistory.
type wecomRig struct {
	sim  *wecomsim.Server
	conn *wecom.Conn
	src  *backfill.WeComHistory
}

func newWeComRig(t *testing.T) *wecomRig {
	t.Helper()
	sim := wecomsim.New(wecomsim.Config{Logger: zerolog.Nop()})
	sim.AddBot("b1", "s1")
	srv := httptest.NewServer(sim.Handler())
	conn, err := wecom.Dial(context.Background(), wecom.Config{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/", BotID: "b1", Secret: "s1", Logger: zerolog.Nop()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); <-conn.Done(); sim.Close(); srv.Close() })
	src := &backfill.WeComHistory{}
	src.Connected("b1", conn)
	return &wecomRig{sim: sim, conn: conn, src: src}
}

// WeCom's history, read over the bot's own connection: every chat with
// messages in the range (more than a page of them), each one's messages
// (more than a page in one), a group told from a single chat, text
// messages only, and each message's id the same on every read.
func TestWeComHistoryReadsEveryPage(t *testing.T) {
	r := newWeComRig(t)
	if err := r.sim.SetMCPAccess(wecomsim.MCPAccess{BotID: "b1", Authorized: true}); err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Minute)
	for _, m := range []wecomsim.MessageRequest{
		{UserID: "u1", Text: "a"}, {UserID: "u1", Text: "b"}, {UserID: "u1", Text: "c"},
		{UserID: "u2", ChatType: wecom.ChatGroup, ChatID: "g1", Text: "in g1"},
		{UserID: "u3", Text: "d"},
		{UserID: "u3", MsgType: wecom.MsgTypeVoice, Text: "spoken"}, // no content in the history: not read
	} {
		m.BotID = "b1"
		if _, err := r.sim.PostMessage(m); err != nil {
			t.Fatal(err)
		}
	}
	read := func() []backfill.Message {
		msgs, err := r.src.History(context.Background(), "b1", since, time.Now().Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}
	msgs := read()
	var got []string
	for _, m := range msgs {
		got = append(got, m.Chat+"/"+m.ChatType+"/"+m.UserID+":"+m.Text)
		if !strings.HasPrefix(m.MsgID, "wecomhist-") || m.Created.Before(since.Truncate(time.Second)) {
			t.Fatalf("message %+v", m)
		}
	}
	if want := "u1/single/u1:a u1/single/u1:b u1/single/u1:c g1/group/u2:in g1 u3/single/u3:d"; strings.Join(got, " ") != want {
		t.Fatalf("read %q, want %q", strings.Join(got, " "), want)
	}
	again := read()
	for i := range msgs {
		if again[i].MsgID != msgs[i].MsgID {
			t.Fatalf("message %d has id %s, then %s", i, msgs[i].MsgID, again[i].MsgID)
		}
	}
	if msgs[0].MsgID == msgs[1].MsgID {
		t.Fatal("two messages, one id")
	}
}

// A history the source cannot read is no history for this gap, and says
// why: not authorized, a member's chats only, older than 7 days. A
// connection missing is an error to retry, not that.
func TestWeComHistoryUnavailable(t *testing.T) {
	r := newWeComRig(t)
	ctx, now := context.Background(), time.Now()
	_, err := r.src.History(ctx, "b1", now.Add(-time.Minute), now)
	if !errors.Is(err, backfill.ErrNoHistory) || !errors.Is(err, backfill.ErrNotAuthorized) || !strings.Contains(err.Error(), "850001") {
		t.Fatalf("not authorized: %v", err)
	}
	if err := r.sim.SetMCPAccess(wecomsim.MCPAccess{BotID: "b1", Authorized: true, Scope: wecomsim.MCPScopeMember, Members: []string{"u1"}}); err != nil {
		t.Fatal(err)
	}
	_, err = r.src.History(ctx, "b1", now.Add(-time.Minute), now)
	if !errors.Is(err, backfill.ErrNoHistory) || !errors.Is(err, backfill.ErrNotCovered) {
		t.Fatalf("a member's history: %v", err)
	}
	if err := r.sim.SetMCPAccess(wecomsim.MCPAccess{BotID: "b1", Authorized: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.src.History(ctx, "b1", now.Add(-time.Minute), now); err != nil {
		t.Fatalf("authorized again: %v", err)
	}
	_, err = r.src.History(ctx, "b1", now.Add(-8*24*time.Hour), now)
	if !errors.Is(err, backfill.ErrNotCovered) || !strings.Contains(err.Error(), "7 days") {
		t.Fatalf("a gap of 8 days: %v", err)
	}
	_, err = r.src.History(ctx, "b2", now.Add(-time.Minute), now)
	if err == nil || errors.Is(err, backfill.ErrNoHistory) {
		t.Fatalf("no connection of b2: %v, want an error to retry", err)
	}
}

// A server that answers in an event stream, and forgets a session (404):
// the source reads the stream's last event, and begins the session again
// once.
func TestWeComHistoryEventStreamAndLostSession(t *testing.T) {
	var inits, calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case strings.Contains(string(body), `"initialize"`):
			w.Header().Set("Mcp-Session-Id", "s"+string(rune('0'+inits.Add(1))))
			io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
		case strings.Contains(string(body), "notifications/initialized"):
			w.WriteHeader(http.StatusAccepted)
		case r.Header.Get("Mcp-Session-Id") == "s1":
			http.Error(w, "session gone", http.StatusNotFound)
		default:
			calls.Add(1)
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\n")
			io.WriteString(w, `data: "result":{"content":[{"type":"text","text":"{\"errcode\":0,\"errmsg\":\"ok\",\"chats\":[],\"has_more\":false,\"next_cursor\":\"\"}"}]}}`+"\n\n")
		}
	}))
	defer srv.Close()
	src := &backfill.WeComHistory{}
	src.Connected("b1", configConn{url: srv.URL})
	msgs, err := src.History(context.Background(), "b1", time.Now().Add(-time.Minute), time.Now())
	if err != nil || len(msgs) != 0 {
		t.Fatalf("history: %v %v", msgs, err)
	}
	if inits.Load() != 2 || calls.Load() != 1 {
		t.Fatalf("%d initializes, %d calls answered; want 2 and 1", inits.Load(), calls.Load())
	}
}

// configConn is a connection whose aibot_get_mcp_config names url.
type configConn struct{ url string }

func (c configConn) Do(_ context.Context, cmd, reqID string, _ any) (*wecom.Frame, error) {
	if cmd != backfill.CmdGetMCPConfig {
		return nil, errors.New("unexpected " + cmd)
	}
	return &wecom.Frame{Headers: wecom.Headers{ReqID: reqID}, Body: []byte(`{"url":"` + c.url + `"}`)}, nil
}

// The server's URL may carry a credential in its path: an error reaching
// it names the server, never the URL.
func TestWeComHistoryErrorHidesTheURL(t *testing.T) {
	src := &backfill.WeComHistory{}
	src.Connected("b1", configConn{url: "http://127.0.0.1:1/mcp/secret-token"})
	_, err := src.History(context.Background(), "b1", time.Now().Add(-time.Minute), time.Now())
	if err == nil || strings.Contains(err.Error(), "secret-token") || errors.Is(err, backfill.ErrNoHistory) {
		t.Fatalf("unreachable server: %v; want an error to retry, without the URL", err)
	}
}
