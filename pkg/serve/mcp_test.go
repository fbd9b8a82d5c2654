package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/mcpgw"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// agentToken is the n8n agent's token in the tests' api.agent_tokens_file.
const agentToken = "n8n-agent-token-0123456789abcdef0123"

// rpcAnswer is one answer of the MCP gateway.
type rpcAnswer struct {
	code   int
	raw    string
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// mcpRPC POSTs one JSON-RPC request to base's gateway of bot's biz with
// token, and extra headers.
func mcpRPC(t *testing.T, base, token, bot, biz, method string, params any, hdr ...string) rpcAnswer {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	req, err := http.NewRequest(http.MethodPost, base+mcpgw.URL(bot, biz), strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := rpcAnswer{code: resp.StatusCode, raw: string(raw)}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatalf("answer is not JSON-RPC: %q", raw)
		}
	}
	return a
}

// toolNames are the names of a tools/list result.
func toolNames(t *testing.T, a rpcAnswer) []string {
	t.Helper()
	var r struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if a.Error != nil || json.Unmarshal(a.Result, &r) != nil {
		t.Fatalf("tools/list: %s", a.raw)
	}
	var names []string
	for _, x := range r.Tools {
		names = append(names, x.Name)
	}
	slices.Sort(names)
	return names
}

// resultText is a tools/call result's text content.
func resultText(a rpcAnswer) string {
	var r struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	_ = json.Unmarshal(a.Result, &r)
	if len(r.Content) == 0 {
		return ""
	}
	return r.Content[0].Text
}

// startMCPCluster is two nodes of b1 whose ai.tools allow msg's
// get_message and every todo tool, with agent n8n's token: n1 holds the
// connection, n2 is a standby.
func startMCPCluster(t *testing.T) *sendCluster {
	agents := keyFile(t, "n8n "+agentToken+"\n")
	c := startSendCluster(t, wecomsim.Config{}, func(cfg *config.Config) {
		cfg.AI.Tools = []string{"msg/get_message", "todo"}
		cfg.API.AgentTokensFile = agents
	})
	for _, biz := range []string{"msg", "todo"} {
		if err := c.sim.SetMCPAccess(wecomsim.MCPAccess{BotID: "b1", BizType: biz, Authorized: true}); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// An agent that cannot hold the bot's connection lists and calls WeCom's
// tools through a standby: the allowlist's tools only, each call
// forwarded to the URL the holder shared, every call audited with the
// agent's name; a tool outside ai.tools is refused (and audited) and
// never reaches WeCom.
func TestMCPGatewayThroughTheStandby(t *testing.T) {
	t.Parallel()
	c := startMCPCluster(t)
	c.talk(t, "alice")
	standby := c.n2.API
	if c.n2.obs.conn("b1") != nil {
		t.Fatal("n2 holds b1's connection: the test needs it to be the standby")
	}

	init := mcpRPC(t, standby, agentToken, "b1", "msg", "initialize", map[string]any{"protocolVersion": "2025-03-26", "capabilities": map[string]any{}})
	if init.Error != nil || !strings.Contains(string(init.Result), `"protocolVersion":"2025-03-26"`) {
		t.Fatalf("initialize: %s", init.raw)
	}
	var list rpcAnswer
	testwait.Eventually(t, time.Minute, "the holder shared msg's URL", func() bool {
		list = mcpRPC(t, standby, agentToken, "b1", "msg", "tools/list", map[string]any{})
		return list.Error == nil
	})
	if got := toolNames(t, list); !slices.Equal(got, []string{"get_message"}) {
		t.Fatalf("msg's tools through the gateway: %v, want only get_message (ai.tools)", got)
	}
	var todos rpcAnswer
	testwait.Eventually(t, time.Minute, "the holder shared todo's URL", func() bool {
		todos = mcpRPC(t, standby, agentToken, "b1", "todo", "tools/list", map[string]any{})
		return todos.Error == nil
	})
	if got := toolNames(t, todos); !slices.Equal(got, []string{"create_todo", "delete_todo", "get_todo_detail", "get_todo_list"}) {
		t.Fatalf("todo's tools: %v, want all four", got)
	}

	now := time.Now().In(wecomsim.MCPTimeZone)
	args := map[string]any{"chat_type": 1, "chatid": "alice", "begin_time": now.Add(-time.Hour).Format(wecomsim.MCPTimeLayout), "end_time": now.Add(time.Minute).Format(wecomsim.MCPTimeLayout)}
	got := mcpRPC(t, standby, agentToken, "b1", "msg", "tools/call", map[string]any{"name": "get_message", "arguments": args})
	if got.Error != nil || !strings.Contains(resultText(got), `"errcode":0`) || !strings.Contains(resultText(got), "hello") {
		t.Fatalf("get_message through the standby: %s", got.raw)
	}
	made := mcpRPC(t, standby, agentToken, "b1", "todo", "tools/call", map[string]any{"name": "create_todo",
		"arguments": map[string]any{"content": "ship it", "follower_list": map[string]any{"followers": []map[string]any{{"follower_id": "alice"}}}}})
	if made.Error != nil || !strings.Contains(resultText(made), `"errcode":0`) {
		t.Fatalf("create_todo through the standby: %s", made.raw)
	}

	// Outside the allowlist: refused as a JSON-RPC error, never sent.
	refused := mcpRPC(t, standby, agentToken, "b1", "msg", "tools/call", map[string]any{"name": "send_message",
		"arguments": map[string]any{"chat_type": 1, "chatid": "alice", "msgtype": "text", "text": map[string]any{"content": "not allowed"}}})
	if refused.Error == nil || refused.Error.Code != -32001 || !strings.Contains(refused.Error.Message, "ai.tools") {
		t.Fatalf("send_message (not in ai.tools): %s, want JSON-RPC error -32001 naming ai.tools", refused.raw)
	}
	for _, e := range c.sim.Transcript("b1", "alice") {
		if strings.Contains(e.Content, "not allowed") {
			t.Fatalf("the refused send reached WeCom: %+v", e)
		}
	}
	if a := mcpRPC(t, standby, agentToken, "b1", "doc", "tools/list", map[string]any{}); a.code != http.StatusForbidden {
		t.Fatalf("a business type outside ai.tools: %d %s, want 403", a.code, a.raw)
	}
	if a := mcpRPC(t, standby, "wrong-token-0123456789abcdef0123456789", "b1", "msg", "tools/list", map[string]any{}); a.code != http.StatusUnauthorized {
		t.Fatalf("a wrong token: %d %s, want 401", a.code, a.raw)
	}
	// The node's own token opens it too, audited as node-token.
	if a := mcpRPC(t, standby, testToken, "b1", "msg", "tools/call", map[string]any{"name": "get_message", "arguments": args}); a.Error != nil {
		t.Fatalf("with the node token: %s", a.raw)
	}

	m := c.n2.scrape(t)
	for _, want := range []string{
		`botctl_mcp_tool_calls_total{agent="n8n",bot="b1",outcome="ok",tool="msg/get_message"} 1`,
		`botctl_mcp_tool_calls_total{agent="n8n",bot="b1",outcome="ok",tool="todo/create_todo"} 1`,
		`botctl_mcp_tool_calls_total{agent="n8n",bot="b1",outcome="refused",tool="msg/send_message"} 1`,
		`botctl_mcp_tool_calls_total{agent="node-token",bot="b1",outcome="ok",tool="msg/get_message"} 1`,
		`botctl_mcp_tool_calls_total{agent="n8n",bot="b1",outcome="ok",tool="msg/tools/list"} 1`,
		`botctl_mcp_tool_calls_total{agent="n8n",bot="b1",outcome="ok",tool="todo/tools/list"} 1`,
		`botctl_mcp_tool_calls_total{agent="n8n",bot="b1",outcome="refused",tool="doc/tools/list"} 1`,
		`botctl_mcp_tool_call_duration_seconds_count{bot="b1",outcome="refused"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("the standby's metrics lack %s", want)
		}
	}
	if strings.Contains(m, "botctl_mcp_tool_calls_total") && strings.Contains(c.n1.scrape(t), `agent="n8n"`) {
		t.Error("the holder counted calls made through the standby")
	}

	// The leader changes: the new holder shares its own URL, and the
	// tools answer again.
	if err := c.n1.Stop(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "n2 holds b1", func() bool { return c.n2.obs.conn("b1") != nil })
	testwait.Eventually(t, time.Minute, "get_message after the failover", func() bool {
		a := mcpRPC(t, standby, agentToken, "b1", "msg", "tools/call", map[string]any{"name": "get_message", "arguments": args})
		return a.Error == nil && strings.Contains(resultText(a), "hello")
	})
	resp, err := c.n2.etcd.Get(t.Context(), etcdkeys.Default.MCP("b1", "msg"))
	if err != nil || len(resp.Kvs) != 1 || !strings.Contains(string(resp.Kvs[0].Value), `"node":"n2"`) {
		t.Fatalf("msg's shared record after the failover: %v %v, want n2's", resp, err)
	}
}

// Per-member authorization: with msg authorized by alice only, a call
// for bob is WeCom's refusal (850001), after which the holder asks for
// the URL again; a call for alice is answered.
func TestMCPGatewayMemberAuthorization(t *testing.T) {
	t.Parallel()
	c := startMCPCluster(t)
	c.talk(t, "alice")
	if err := c.sim.SetMCPAccess(wecomsim.MCPAccess{BotID: "b1", BizType: "msg", Authorized: true, Scope: wecomsim.MCPScopeMember, Members: []string{"alice"}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().In(wecomsim.MCPTimeZone)
	args := map[string]any{"chat_type": 1, "chatid": "alice", "begin_time": now.Add(-time.Hour).Format(wecomsim.MCPTimeLayout), "end_time": now.Add(time.Minute).Format(wecomsim.MCPTimeLayout)}
	call := func(user string) rpcAnswer {
		return mcpRPC(t, c.n2.API, agentToken, "b1", "msg", "tools/call", map[string]any{"name": "get_message", "arguments": args}, mcpgw.RequesterHeader, user)
	}
	var bob rpcAnswer
	testwait.Eventually(t, time.Minute, "msg's URL shared", func() bool { bob = call("bob"); return bob.Error == nil })
	if !strings.Contains(resultText(bob), fmt.Sprintf(`"errcode":%d`, wecomsim.ErrCodeMCPUnauthorized)) {
		t.Fatalf("bob, who did not authorize the bot: %s, want errcode 850001", bob.raw)
	}
	var alice rpcAnswer
	testwait.Eventually(t, time.Minute, "alice answered (the URL asked for again)", func() bool { alice = call("alice"); return alice.Error == nil })
	if !strings.Contains(resultText(alice), `"errcode":0`) || !strings.Contains(resultText(alice), "hello") {
		t.Fatalf("alice, who authorized the bot: %s", alice.raw)
	}
	if !strings.Contains(c.n2.scrape(t), `botctl_mcp_tool_calls_total{agent="n8n",bot="b1",outcome="wecom_error",tool="msg/get_message"} 1`) {
		t.Error("bob's refused call is not audited as wecom_error")
	}
}
