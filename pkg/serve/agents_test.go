package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// agentServer is a local agent platform: it keeps every request's body
// and answers with answer(body).
type agentServer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies []map[string]any
}

func newAgentServer(t *testing.T, answer func(w http.ResponseWriter, body map[string]any, n int)) *agentServer {
	a := &agentServer{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		a.mu.Lock()
		a.bodies = append(a.bodies, body)
		n := len(a.bodies)
		a.mu.Unlock()
		answer(w, body, n)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *agentServer) requests() []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]map[string]any(nil), a.bodies...)
}

func keyFile(t *testing.T, secret string) string {
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// answeredWith reports whether user's conversation got a finished answer
// holding text.
func answeredWith(sim *wecomsim.Server, user, text string) bool {
	for _, m := range sim.Transcript("b1", user) {
		if m.From == "bot" && m.Finished && strings.Contains(m.Content, text) {
			return true
		}
	}
	return false
}

// TestServeDifyConversationAfterFailover: with ai.kind dify, a user's
// answer comes from Dify, and after the leader stops, the next question
// (answered by the node that took over) continues the Dify conversation
// the first one started.
func TestServeDifyConversationAfterFailover(t *testing.T) {
	t.Parallel()
	dify := newAgentServer(t, func(w http.ResponseWriter, body map[string]any, n int) {
		conv, _ := body["conversation_id"].(string)
		if conv == "" {
			conv = fmt.Sprintf("conv-%d", n)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: ping\n\n")
		fmt.Fprintf(w, `data: {"event": "message", "conversation_id": %q, "answer": "dify says %v"}`+"\n\n", conv, body["query"])
		fmt.Fprintf(w, `data: {"event": "message_end", "conversation_id": %q}`+"\n\n", conv)
	})
	e, ns := startEtcd(t), startNATS(t)
	sim, addr := startSimServer(t)
	nodeCfg := func(node string) config.Config {
		cfg := nodeConfig(t, "ws://"+addr+"/", e, ns.ClientURL())
		cfg.NodeID = node
		cfg.AI.Kind = config.AIKindDify
		cfg.AI.Dify.BaseURL = dify.srv.URL + "/v1"
		cfg.AI.Dify.APIKeyFile = keyFile(t, "app-0123456789")
		return cfg
	}
	n1, err := startNode(t, nodeCfg("n1"))
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "n1 connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "alice", Text: "first"}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "alice answered by Dify", func() bool { return answeredWith(sim, "alice", "dify says first") })

	if _, err := startNode(t, nodeCfg("n2")); err != nil {
		t.Fatal(err)
	}
	if err := n1.Stop(); err != nil {
		t.Fatalf("n1 stopped with %v", err)
	}
	// The question goes to the node that took over (one posted while no
	// node holds the connection is the gap backfill's, tested on its own).
	testwait.Eventually(t, 2*time.Minute, "n2 connected", func() bool {
		st, _ := sim.Stats("b1")
		return st.Connected && st.Connections >= 2
	})
	if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "alice", Text: "second"}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 2*time.Minute, "alice answered after the failover", func() bool { return answeredWith(sim, "alice", "dify says second") })
	reqs := dify.requests()
	last := reqs[len(reqs)-1]
	if last["query"] != "second" || last["conversation_id"] != "conv-1" || last["user"] != "alice" {
		t.Fatalf("the question after the failover sent %v, want query second, conversation_id conv-1, user alice", last)
	}
}

// TestServeHTTPAgent: with ai.kind http, the webhook gets who asked where
// and the conversation's turns before the question, and its plain-text
// answer reaches the user.
func TestServeHTTPAgent(t *testing.T) {
	t.Parallel()
	agent := newAgentServer(t, func(w http.ResponseWriter, body map[string]any, n int) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "agent says %v", body["question"])
	})
	e, ns := startEtcd(t), startNATS(t)
	sim, addr := startSimServer(t)
	cfg := nodeConfig(t, "ws://"+addr+"/", e, ns.ClientURL())
	cfg.AI.Kind = config.AIKindHTTP
	cfg.AI.HTTP.URL = agent.srv.URL + "/webhook/x"
	if _, err := startNode(t, cfg); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	for _, q := range []string{"first", "second"} {
		if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "bob", Text: q}); err != nil {
			t.Fatal(err)
		}
		testwait.Eventually(t, time.Minute, "bob answered", func() bool { return answeredWith(sim, "bob", "agent says "+q) })
	}
	reqs := agent.requests()
	last := reqs[len(reqs)-1]
	history, _ := json.Marshal(last["history"])
	if last["bot"] != "b1" || last["chat"] != "bob" || last["chat_type"] != "single" || last["user"] != "bob" || last["msgid"] == "" ||
		last["question"] != "second" || string(history) != `[{"content":"first","role":"user"},{"content":"agent says first","role":"assistant"}]` {
		t.Fatalf("the webhook got %v", last)
	}
}
