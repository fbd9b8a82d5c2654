package mcpgw

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
)

type fixedAllow map[string][]string

func (f fixedAllow) Tools(bot string) ([]string, bool) { t, ok := f[bot]; return t, ok }

// The allowlist's entries: a business type lets every tool of it
// through, BIZ/TOOL that tool only.
func TestAllowed(t *testing.T) {
	tools := []string{"msg/get_message", "todo"}
	for _, c := range []struct {
		biz, tool string
		want      bool
	}{{"msg", "get_message", true}, {"msg", "send_message", false}, {"todo", "create_todo", true}, {"doc", "get_doc", false}, {"msg/get_message", "", false}} {
		if got := allowed(tools, c.biz, c.tool); got != c.want {
			t.Errorf("%s/%s: %v, want %v", c.biz, c.tool, got, c.want)
		}
	}
	if !bizAllowed(tools, "msg") || !bizAllowed(tools, "todo") || bizAllowed(tools, "doc") {
		t.Error("bizAllowed")
	}
	if got := BizTypes([]string{"msg/get_message", "todo", "msg/send_message"}); strings.Join(got, ",") != "msg,todo" {
		t.Errorf("BizTypes: %v", got)
	}
}

// A refused call is counted and logged with the bot, agent, tool and
// outcome, and nothing of what it carried.
func TestRefusalAudited(t *testing.T) {
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	g := New(Options{Allow: fixedAllow{"b1": {"msg/get_message"}}, NodeToken: "node-token-0123456789abcdef0123456789", Registry: reg, Logger: zerolog.New(&logs)})
	_, outcome, err := g.call(context.Background(), toolCall{bot: "b1", agent: "n8n", biz: "msg", tool: "send_message", args: json.RawMessage(`{"text":{"content":"secret words"}}`)})
	if outcome != OutcomeRefused || err == nil || !strings.Contains(err.Error(), "ai.tools") {
		t.Fatalf("outcome %q, %v", outcome, err)
	}
	if n := count(g.audit.calls.WithLabelValues("b1", "n8n", "msg/send_message", OutcomeRefused)); n != 1 {
		t.Fatalf("refusals counted: %v", n)
	}
	line := logs.String()
	for _, want := range []string{`"bot":"b1"`, `"agent":"n8n"`, `"tool":"msg/send_message"`, `"outcome":"refused"`, `"duration"`} {
		if !strings.Contains(line, want) {
			t.Errorf("the audit line lacks %s: %s", want, line)
		}
	}
	if strings.Contains(line, "secret words") || strings.Count(line, "\n") != 1 {
		t.Errorf("the audit line is not one line without content: %s", line)
	}
	// An agent's made-up tool name is counted as "invalid", not as a
	// label value of its own.
	g.call(context.Background(), toolCall{bot: "b1", agent: "n8n", biz: "msg", tool: "Drop Table"})
	if n := count(g.audit.calls.WithLabelValues("b1", "n8n", "invalid", OutcomeRefused)); n != 1 {
		t.Fatalf("an invalid name counted: %v", n)
	}
}

// The node's token and each agent's open the gateway, as that agent;
// nothing else does.
func TestAuth(t *testing.T) {
	a := newAuth("node-token-0123456789abcdef0123456789", map[string]string{"agent-token-0123456789abcdef012345": "n8n"})
	for tok, want := range map[string]string{"node-token-0123456789abcdef0123456789": NodeAgent, "agent-token-0123456789abcdef012345": "n8n", "": "", "nope": ""} {
		r := httptest.NewRequest("POST", "/", nil)
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		if got := a.agent(r); got != want {
			t.Errorf("token %q: agent %q, want %q", tok, got, want)
		}
	}
}

func count(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}
