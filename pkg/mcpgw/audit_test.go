package mcpgw

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// wecomMCP is a stand-in for WeCom's msg server: tools/list answers two
// tools, or, while broken is 1, a JSON-RPC error, and while it is 2,
// HTTP 500.
func wecomMCP(t *testing.T, broken *atomic.Int32) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		_ = json.Unmarshal(raw, &req)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case req.Method == "initialize":
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"result":{"protocolVersion":"2025-03-26","capabilities":{}}}`)
		case broken.Load() == 2:
			w.WriteHeader(http.StatusInternalServerError)
		case broken.Load() == 1:
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"error":{"code":-32603,"message":"internal"}}`)
		default:
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"result":{"tools":[`+
				`{"name":"get_message","description":"secret description of get_message"},{"name":"send_message","description":"sends"}]}}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Every tools/list is audited as the tool BIZ_TYPE/tools/list, as a
// tools/call is: counted by outcome (ok, wecom_error, failed,
// unavailable) and logged on one line naming the bot, agent, tool,
// outcome and duration, and nothing of the tools listed. A list or a
// call of a business type in no entry of ai.tools is refused (403) and
// audited as refused.
func TestListAudited(t *testing.T) {
	e := testenv.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var broken atomic.Int32
	srv := wecomMCP(t, &broken)
	var logs bytes.Buffer
	const token = "agent-token-0123456789abcdef012345"
	g := New(Options{Node: "n1", Etcd: cli, Allow: fixedAllow{"b1": {"msg/get_message"}}, AgentTokens: map[string]string{token: "n8n"},
		Registry: prometheus.NewRegistry(), Logger: zerolog.New(&logs)})
	mux := http.NewServeMux()
	g.Routes(mux)
	rpc := func(biz, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, URL("b1", biz), strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	listed := func(outcome string) float64 {
		return count(g.audit.calls.WithLabelValues("b1", "n8n", "msg/tools/list", outcome))
	}

	// No URL shared yet.
	if w := rpc("msg", list); !strings.Contains(w.Body.String(), `"error"`) || listed(OutcomeUnavailable) != 1 {
		t.Fatalf("a list without a URL: %s; unavailable counted %v", w.Body, listed(OutcomeUnavailable))
	}
	rec, _ := json.Marshal(Record{URL: srv.URL + "/mcp/msg", Node: "n1", Term: 1, Fetched: time.Now(), Expires: time.Now().Add(time.Hour)})
	if _, err := cli.Put(context.Background(), g.keys.MCP("b1", "msg"), string(rec)); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	if w := rpc("msg", list); !strings.Contains(w.Body.String(), `"get_message"`) || strings.Contains(w.Body.String(), "send_message") || listed(OutcomeOK) != 1 {
		t.Fatalf("a list: %s; ok counted %v", w.Body, listed(OutcomeOK))
	}
	line := logs.String()
	for _, want := range []string{`"bot":"b1"`, `"agent":"n8n"`, `"tool":"msg/tools/list"`, `"outcome":"ok"`, `"duration"`} {
		if !strings.Contains(line, want) {
			t.Errorf("the audit line lacks %s: %s", want, line)
		}
	}
	if strings.Contains(line, "secret description") || strings.Contains(line, "get_message") || strings.Count(line, "\n") != 1 {
		t.Errorf("the audit line is not one line without content: %s", line)
	}
	broken.Store(1)
	rpc("msg", list)
	broken.Store(2)
	rpc("msg", list)
	if listed(OutcomeWeComError) != 1 || listed(OutcomeFailed) != 1 {
		t.Errorf("wecom_error %v, failed %v, want 1 each", listed(OutcomeWeComError), listed(OutcomeFailed))
	}

	// The openai backend's lists are audited too, as its agent.
	broken.Store(0)
	if tools, err := g.Backend("backend").List(context.Background(), "b1", "alice"); err != nil || len(tools) != 1 {
		t.Fatalf("the backend's list: %v %v", tools, err)
	}
	if n := count(g.audit.calls.WithLabelValues("b1", "backend", "msg/tools/list", OutcomeOK)); n != 1 {
		t.Errorf("the backend's list counted %v", n)
	}

	// A business type in no entry: refused, and audited.
	if w := rpc("todo", list); w.Code != http.StatusForbidden {
		t.Fatalf("todo's list: %d %s", w.Code, w.Body)
	}
	if w := rpc("todo", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_todo","arguments":{"text":"secret words"}}}`); w.Code != http.StatusForbidden {
		t.Fatalf("todo's call: %d %s", w.Code, w.Body)
	}
	rpc("todo", `{"jsonrpc":"2.0","id":3,"method":"initialize"}`) // refused, not a tool's: not audited
	if a, b := count(g.audit.calls.WithLabelValues("b1", "n8n", "todo/tools/list", OutcomeRefused)),
		count(g.audit.calls.WithLabelValues("b1", "n8n", "todo/create_todo", OutcomeRefused)); a != 1 || b != 1 {
		t.Errorf("refusals of todo counted: list %v, call %v", a, b)
	}
	if strings.Contains(logs.String(), "secret words") {
		t.Errorf("a refusal logged what the call carried: %s", logs.String())
	}
}
