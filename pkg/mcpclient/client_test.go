package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// statefulServer is an MCP server that gives a session id at initialize,
// wants notifications/initialized, forgets its sessions on forget(), and
// answers tools/list with the requester it was called for, as an event
// stream.
type statefulServer struct {
	srv      *httptest.Server
	mu       sync.Mutex
	sessions map[string]bool
	n        int
	methods  []string
}

func newStatefulServer(t *testing.T) *statefulServer {
	s := &statefulServer{sessions: map[string]bool{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		_ = json.Unmarshal(raw, &req)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.methods = append(s.methods, req.Method)
		switch {
		case req.Method == "initialize":
			s.n++
			sid := fmt.Sprintf("s%d", s.n)
			s.sessions[sid] = true
			w.Header().Set("Mcp-Session-Id", sid)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"result":{"protocolVersion":"`+ProtocolVersion+`"}}`)
		case !s.sessions[r.Header.Get("Mcp-Session-Id")]:
			w.WriteHeader(http.StatusNotFound)
		case req.Method == "notifications/initialized":
			w.WriteHeader(http.StatusAccepted)
		case req.Method == "broken":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"error":{"code":-32601,"message":"no such method"}}`)
		case req.Method == "big":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"result":{"text":"`+strings.Repeat("x", 2048)+`"}}`)
		default:
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n")
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"for\":%q}}\n\n", req.ID, r.Header.Get(RequesterHeader))
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *statefulServer) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions = map[string]bool{}
}

func (s *statefulServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.methods...)
}

// A session is begun once per URL and begun again once when the server
// forgets it; an event stream's last event is the answer; the requester
// is passed on.
func TestCallKeepsTheSession(t *testing.T) {
	s := newStatefulServer(t)
	c := New(Options{})
	url := s.srv.URL + "/mcp/secret-token"
	for i := range 2 {
		res, err := c.Call(context.Background(), url, "alice", "tools/list", map[string]any{})
		if err != nil || string(res) != `{"for":"alice"}` {
			t.Fatalf("call %d: %s %v", i, res, err)
		}
	}
	if got := strings.Join(s.seen(), ","); got != "initialize,notifications/initialized,tools/list,tools/list" {
		t.Fatalf("the server saw %s", got)
	}
	s.forget()
	if res, err := c.Call(context.Background(), url, "", "tools/list", nil); err != nil || string(res) != `{"for":""}` {
		t.Fatalf("after the server forgot the session: %s %v", res, err)
	}
	if got := strings.Join(s.seen()[4:], ","); got != "tools/list,initialize,notifications/initialized,tools/list" {
		t.Fatalf("after the server forgot: %s", got)
	}
}

// Errors say what failed, as sentinels and types a caller can match,
// and never hold the URL (WeCom's carries a credential).
func TestCallErrors(t *testing.T) {
	s := newStatefulServer(t)
	c := New(Options{MaxBytes: 1024, Server: "the test server"})
	url := s.srv.URL + "/mcp/secret-token"
	_, err := c.Call(context.Background(), url, "", "broken", nil)
	var rpc *RPCError
	if !errors.As(err, &rpc) || rpc.Code != -32601 || !strings.Contains(err.Error(), "the test server") {
		t.Errorf("a JSON-RPC error: %v", err)
	}
	if _, err := c.Call(context.Background(), url, "", "big", nil); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "1024 bytes") {
		t.Errorf("an answer over the bound: %v", err)
	}
	s.srv.Close()
	_, err = c.Call(context.Background(), url, "", "tools/list", nil)
	if err == nil || strings.Contains(err.Error(), "secret-token") || !strings.Contains(err.Error(), "the test server") {
		t.Errorf("a server gone: %v", err)
	}
	if _, err := New(Options{}).Call(context.Background(), "http://127.0.0.1:1/\x00secret-token", "", "tools/list", nil); err == nil || strings.Contains(err.Error(), "secret-token") {
		t.Errorf("a URL no request can be made to: %v", err)
	}
}

func TestLastEventData(t *testing.T) {
	for in, want := range map[string]string{
		"data: a\n\ndata: b\ndata: c\n\n": "b\nc",
		"data:x\r\n\r\ndata: y":           "y",
		"":                                "",
	} {
		if got := string(LastEventData([]byte(in))); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
