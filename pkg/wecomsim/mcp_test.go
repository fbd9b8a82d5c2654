package wecomsim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
)

// mcpClient speaks the simulator's MCP over Streamable HTTP, as the
// official plugin does: initialize, notifications/initialized, then
// tools/call with the session id.
type mcpClient struct {
	t         *testing.T
	url       string
	sid       string
	requester string
}

func (m *mcpClient) post(body map[string]any) (int, map[string]any, http.Header) {
	m.t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, m.url, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	if m.sid != "" {
		req.Header.Set("Mcp-Session-Id", m.sid)
	}
	if m.requester != "" {
		req.Header.Set(MCPRequesterHeader, m.requester)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		m.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, resp.Header
}

func (m *mcpClient) initialize() {
	m.t.Helper()
	code, out, hdr := m.post(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{"protocolVersion": "2025-03-26"}})
	if code != http.StatusOK || out["result"] == nil || hdr.Get("Mcp-Session-Id") == "" {
		m.t.Fatalf("initialize: %d %v session %q", code, out, hdr.Get("Mcp-Session-Id"))
	}
	m.sid = hdr.Get("Mcp-Session-Id")
	if code, _, _ := m.post(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}); code != http.StatusAccepted {
		m.t.Fatalf("notifications/initialized: %d", code)
	}
}

// tool calls a tool and returns its business result (the text content).
func (m *mcpClient) tool(name string, args map[string]any) map[string]any {
	m.t.Helper()
	code, out, _ := m.post(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": map[string]any{"name": name, "arguments": args}})
	if code != http.StatusOK || out["error"] != nil {
		m.t.Fatalf("%s: %d %v", name, code, out)
	}
	content := out["result"].(map[string]any)["content"].([]any)[0].(map[string]any)
	var biz map[string]any
	if err := json.Unmarshal([]byte(content["text"].(string)), &biz); err != nil {
		m.t.Fatalf("%s: text content is not JSON: %v", name, err)
	}
	return biz
}

func bizCode(t *testing.T, biz map[string]any, want int) {
	t.Helper()
	if got := int(biz["errcode"].(float64)); got != want {
		t.Fatalf("errcode %d (%v), want %d", got, biz["errmsg"], want)
	}
}

// The bot asks for the msg server over its connection and reads the
// chats with messages in a range and each one's messages, every page,
// only while it is authorized; a member-scoped history answers only an
// authorizing member's calls, with that member's chats.
func TestMCPMessageHistory(t *testing.T) {
	h := newSim(t, Config{})
	defer h.close()
	c := h.subscribe(bot1, secret1)
	wantCode(t, c.call(CmdGetMCPConfig, "cfg1", map[string]string{"biz_type": "todo_unknown"}), wecom.ErrCodeInvalidParam)
	a := c.call(CmdGetMCPConfig, "cfg2", map[string]string{"biz_type": "msg", "plugin_version": "test"})
	wantCode(t, a, 0)
	var cfg struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(a.Body, &cfg); err != nil || !strings.HasPrefix(cfg.URL, h.ts.URL+"/mcp/") {
		t.Fatalf("config body %s: want {\"url\": %s/mcp/…}", a.Body, h.ts.URL)
	}
	c.close()

	t0 := h.clock.Now()
	for _, m := range []MessageRequest{
		{BotID: bot1, UserID: "u1", Text: "one"},
		{BotID: bot1, UserID: "u1", Text: "two"},
		{BotID: bot1, UserID: "u2", ChatType: wecom.ChatGroup, ChatID: "g1", Text: "in the group"},
		{BotID: bot1, UserID: "u3", Text: "three"},
		{BotID: bot2, UserID: "u1", Text: "to another bot"},
	} {
		h.clock.Advance(time.Minute)
		h.post(m)
	}
	rng := map[string]any{"begin_time": t0.In(MCPTimeZone).Format(MCPTimeLayout), "end_time": h.clock.Now().In(MCPTimeZone).Format(MCPTimeLayout)}
	m := &mcpClient{t: t, url: cfg.URL}
	if code, _, _ := m.post(map[string]any{"jsonrpc": "2.0", "id": 9, "method": "tools/list"}); code != http.StatusNotFound {
		t.Fatalf("a call before initialize: %d, want 404", code)
	}
	m.initialize()
	bizCode(t, m.tool("get_msg_chat_list", rng), ErrCodeMCPUnauthorized) // not authorized by default

	if err := h.srv.SetMCPAccess(MCPAccess{BotID: bot1, Authorized: true}); err != nil {
		t.Fatal(err)
	}
	var chats []string
	args := map[string]any{"begin_time": rng["begin_time"], "end_time": rng["end_time"]}
	for pages := 0; ; pages++ {
		biz := m.tool("get_msg_chat_list", args)
		bizCode(t, biz, 0)
		for _, ch := range biz["chats"].([]any) {
			chats = append(chats, ch.(map[string]any)["chat_id"].(string))
		}
		if biz["has_more"] != true {
			if pages == 0 {
				t.Fatal("3 chats in one page: paging not exercised")
			}
			break
		}
		args["cursor"] = biz["next_cursor"]
	}
	if strings.Join(chats, ",") != "u1,g1,u3" {
		t.Fatalf("chats %v, want u1,g1,u3 (bot2's not among them)", chats)
	}
	read := func(m *mcpClient, chatType int, chat string) []string {
		var texts []string
		args := map[string]any{"chat_type": chatType, "chatid": chat, "begin_time": rng["begin_time"], "end_time": rng["end_time"]}
		for {
			biz := m.tool("get_message", args)
			bizCode(t, biz, 0)
			for _, x := range biz["messages"].([]any) {
				msg := x.(map[string]any)
				texts = append(texts, msg["userid"].(string)+":"+msg["text"].(map[string]any)["content"].(string)+"@"+msg["send_time"].(string))
			}
			if biz["next_cursor"] == "" {
				return texts
			}
			args["cursor"] = biz["next_cursor"]
		}
	}
	at := func(d time.Duration) string { return t0.Add(d).In(MCPTimeZone).Format(MCPTimeLayout) }
	if got := read(m, 1, "u1"); strings.Join(got, ";") != "u1:one@"+at(time.Minute)+";u1:two@"+at(2*time.Minute) {
		t.Fatalf("u1's messages %v", got)
	}
	if got := read(m, 2, "g1"); len(got) != 1 || got[0] != "u2:in the group@"+at(3*time.Minute) {
		t.Fatalf("g1's messages %v", got)
	}
	if got := read(m, 1, "g1"); len(got) != 0 {
		t.Fatalf("g1 read as a single chat: %v", got)
	}
	old := map[string]any{"begin_time": t0.Add(-8 * 24 * time.Hour).In(MCPTimeZone).Format(MCPTimeLayout), "end_time": rng["end_time"]}
	bizCode(t, m.tool("get_msg_chat_list", old), wecom.ErrCodeInvalidParam)

	// A member's history: refused without the requester, that member's
	// chats with it.
	if err := h.srv.SetMCPAccess(MCPAccess{BotID: bot1, Authorized: true, Scope: MCPScopeMember, Members: []string{"u2"}}); err != nil {
		t.Fatal(err)
	}
	bizCode(t, m.tool("get_msg_chat_list", rng), wecom.ErrCodeInvalidParam)
	m.requester = "u1"
	bizCode(t, m.tool("get_msg_chat_list", rng), ErrCodeMCPUnauthorized)
	m.requester = "u2"
	biz := m.tool("get_msg_chat_list", rng)
	bizCode(t, biz, 0)
	if list := biz["chats"].([]any); len(list) != 1 || list[0].(map[string]any)["chat_id"] != "g1" {
		t.Fatalf("u2's chats %v, want g1 only", list)
	}
	if err := h.srv.SetMCPAccess(MCPAccess{BotID: bot1, Scope: "everyone"}); err == nil {
		t.Fatal("an unknown scope accepted")
	}
	if code, _ := h.httpDo(http.MethodPost, "/control/mcp_access", map[string]any{"bot_id": bot1, "authorized": false}); code != http.StatusOK {
		t.Fatalf("POST /control/mcp_access: %d", code)
	}
	m.requester = ""
	bizCode(t, m.tool("get_msg_chat_list", rng), ErrCodeMCPUnauthorized)
}

// mcpURL asks for bizType's server on a fresh connection of bot1.
func mcpURL(t *testing.T, h *harness, bizType string) string {
	t.Helper()
	c := h.subscribe(bot1, secret1)
	defer c.close()
	a := c.call(CmdGetMCPConfig, "cfg-"+bizType, map[string]string{"biz_type": bizType})
	wantCode(t, a, 0)
	var cfg struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(a.Body, &cfg); err != nil || cfg.URL == "" {
		t.Fatalf("config body %s: want a url", a.Body)
	}
	return cfg.URL
}

// msg's send_message puts a text in a chat of the bot's, only while the
// bot is authorized (for the member scope: a call naming an authorizing
// member), and refuses a chat nobody talked in and a text too long.
func TestMCPSendMessage(t *testing.T) {
	h := newSim(t, Config{})
	defer h.close()
	h.post(MessageRequest{BotID: bot1, UserID: "u1", Text: "hi"})
	m := &mcpClient{t: t, url: mcpURL(t, h, "msg")}
	m.initialize()
	send := map[string]any{"chat_type": 1, "chatid": "u1", "msgtype": "text", "text": map[string]any{"content": "from a tool"}}
	bizCode(t, m.tool("send_message", send), ErrCodeMCPUnauthorized)
	if err := h.srv.SetMCPAccess(MCPAccess{BotID: bot1, Authorized: true}); err != nil {
		t.Fatal(err)
	}
	bizCode(t, m.tool("send_message", send), 0)
	var sent []string
	for _, e := range h.srv.Transcript(bot1, "u1") {
		if e.From == "bot" && e.Kind == wecom.MsgTypeText {
			sent = append(sent, e.Content)
		}
	}
	if len(sent) != 1 || sent[0] != "from a tool" {
		t.Fatalf("u1's chat shows %v from the bot, want the tool's text once", sent)
	}
	bizCode(t, m.tool("send_message", map[string]any{"chat_type": 1, "chatid": "nobody", "msgtype": "text", "text": map[string]any{"content": "x"}}), wecom.ErrCodeChatNotFound)
	bizCode(t, m.tool("send_message", map[string]any{"chat_type": 1, "chatid": "u1", "msgtype": "text", "text": map[string]any{"content": strings.Repeat("x", MCPMaxSendBytes+1)}}), wecom.ErrCodeInvalidParam)
	bizCode(t, m.tool("send_message", map[string]any{"chat_type": 1, "chatid": "u1", "msgtype": "markdown"}), wecom.ErrCodeInvalidMsgType)
	if err := h.srv.SetMCPAccess(MCPAccess{BotID: bot1, Authorized: true, Scope: MCPScopeMember, Members: []string{"u1"}}); err != nil {
		t.Fatal(err)
	}
	bizCode(t, m.tool("send_message", send), wecom.ErrCodeInvalidParam) // no requester
	m.requester = "u1"
	bizCode(t, m.tool("send_message", send), 0)
}

// The todo business type is authorized on its own: a to-do created is
// listed, read in detail and deleted; under the member scope a member
// lists their own to-dos only.
func TestMCPTodo(t *testing.T) {
	h := newSim(t, Config{})
	defer h.close()
	if err := h.srv.SetMCPAccess(MCPAccess{BotID: bot1, Authorized: true}); err != nil { // msg's, not todo's
		t.Fatal(err)
	}
	m := &mcpClient{t: t, url: mcpURL(t, h, "todo")}
	m.initialize()
	create := map[string]any{"content": "write the report", "follower_list": map[string]any{"followers": []any{map[string]any{"follower_id": "u1", "follower_status": 1}}}}
	bizCode(t, m.tool("create_todo", create), ErrCodeMCPUnauthorized)
	if code, _ := h.httpDo(http.MethodPost, "/control/mcp_access", map[string]any{"bot_id": bot1, "biz_type": "todo", "authorized": true}); code != http.StatusOK {
		t.Fatalf("POST /control/mcp_access for todo: %d", code)
	}
	made := m.tool("create_todo", create)
	bizCode(t, made, 0)
	id, _ := made["todo_id"].(string)
	list := m.tool("get_todo_list", map[string]any{"follower_id": "u1"})
	bizCode(t, list, 0)
	if items := list["todo_list"].([]any); len(items) != 1 || items[0].(map[string]any)["todo_id"] != id {
		t.Fatalf("u1's to-dos %v, want %s", items, id)
	}
	detail := m.tool("get_todo_detail", map[string]any{"todo_id_list": []string{id}})
	bizCode(t, detail, 0)
	if d := detail["data_list"].([]any); len(d) != 1 || d[0].(map[string]any)["content"] != "write the report" {
		t.Fatalf("detail %v", d)
	}
	bizCode(t, m.tool("get_todo_list", map[string]any{}), wecom.ErrCodeInvalidParam)

	if err := h.srv.SetMCPAccess(MCPAccess{BotID: bot1, BizType: "todo", Authorized: true, Scope: MCPScopeMember, Members: []string{"u1", "u2"}}); err != nil {
		t.Fatal(err)
	}
	m.requester = "u2"
	bizCode(t, m.tool("get_todo_list", map[string]any{"follower_id": "u1"}), ErrCodeMCPUnauthorized)
	bizCode(t, m.tool("delete_todo", map[string]any{"todo_id": id}), ErrCodeMCPUnauthorized) // created by the bot, not u2
	m.requester = "u1"
	bizCode(t, m.tool("get_todo_list", map[string]any{"follower_id": "u1"}), 0)
	if err := h.srv.SetMCPAccess(MCPAccess{BotID: bot1, BizType: "todo", Authorized: true}); err != nil {
		t.Fatal(err)
	}
	bizCode(t, m.tool("delete_todo", map[string]any{"todo_id": id}), 0)
	if todos := h.srv.Todos(bot1); len(todos) != 1 || todos[0].TodoStatus != TodoDeleted {
		t.Fatalf("to-dos after the delete: %+v", todos)
	}
	if err := h.srv.SetMCPAccess(MCPAccess{BotID: bot1, BizType: "calendar", Authorized: true}); err == nil {
		t.Fatal("an unknown business type authorized")
	}
}
