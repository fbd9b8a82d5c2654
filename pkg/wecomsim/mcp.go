package wecomsim

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sync"

	"github.com/botctl/botctl/internal/httpjson"
	"github.com/botctl/botctl/pkg/wecom"
)

// WeCom's MCP servers, as the official OpenClaw plugin reaches them: the
// bot asks over its own long connection for a business type's server
// (aibot_get_mcp_config with {"biz_type": …}, acked with {"url": …}) and
// then speaks MCP's Streamable HTTP to that URL: JSON-RPC 2.0 in a POST,
// initialize first (answered with an Mcp-Session-Id the later requests
// carry), then tools/list and tools/call. A tool's business outcome is a
// JSON object with errcode and errmsg in the result's text content, as
// WeCom's servers answer (the plugin reads 850001 and 851014 there: the
// bot's authorization expired or was reset).
//
// The simulator serves every business type registered in mcpBizTypes at
// /mcp/{token}, one token per bot and business type: "msg" (the message
// history and send_message, mcpmsg.go) and "todo" (mcptodo.go). Adding a
// business type or a tool is one entry there; the transport below does
// not change. Each business type is authorized per bot on its own
// (MCPAccess), for the bot or for the members who authorized it.

// CmdGetMCPConfig asks for a business type's MCP server over the bot's
// connection (the official plugin's MCP_GET_CONFIG_CMD).
const CmdGetMCPConfig = "aibot_get_mcp_config"

// MCP errcodes carried in a tool's result (the official plugin's
// BIZ_CACHE_CLEAR_ERROR_CODES).
const (
	// ErrCodeMCPUnauthorized: the bot's authorization of the business
	// type expired, or was never granted.
	ErrCodeMCPUnauthorized = 850001
	// ErrCodeMCPAuthReset: the bot's authorization was reset.
	ErrCodeMCPAuthReset = 851014
)

// MCPRequesterHeader carries the WeCom userid of the person on whose
// behalf a tool is called (the official plugin's WECOM_USERID_HEADER: the
// sender of the message its agent answers).
const MCPRequesterHeader = "x-openclaw-wecom-userid"

// mcpTool is one tool of a business type: its listing and its handler.
type mcpTool struct {
	description string
	inputSchema map[string]any
	handler     mcpHandler
}

// mcpHandler answers a tool's call with the business result (marshalled
// into the text content) or an *mcpBizError.
type mcpHandler interface {
	call(s *Server, cc mcpCall, args json.RawMessage) (any, error)
}

// mcpCall is who calls a tool: the bot the URL belongs to, its business
// type, and the requester header, if any.
type mcpCall struct {
	bot       string
	bizType   string
	requester string
}

// mcpBizError is a tool's business refusal: errcode ≠ 0 in the text
// content, not a JSON-RPC error.
type mcpBizError struct {
	code int
	msg  string
}

func (e *mcpBizError) Error() string { return fmt.Sprintf("errcode %d: %s", e.code, e.msg) }

// mcpBizTypes are the business types the simulator serves, by biz_type.
var mcpBizTypes = map[string]map[string]mcpTool{
	"msg":  msgTools,
	"todo": todoTools,
}

// mcpEndpoint is the server a token names.
type mcpEndpoint struct {
	bot, bizType string
}

// mcpState is the simulator's MCP side: tokens, sessions and each bot's
// authorization (guarded by mu).
type mcpState struct {
	mu       sync.Mutex
	tokens   map[string]mcpEndpoint    // token → server
	byBot    map[mcpEndpoint]string    // server → token
	sessions map[string]string         // Mcp-Session-Id → token
	access   map[mcpEndpoint]MCPAccess // a bot's business type → its authorization; absent: none
	todos    map[string][]Todo         // bot → its to-dos, oldest first (mcptodo.go)
}

// MCPAccess is a bot's authorization of one business type (the message
// history and sends of "msg", the to-dos of "todo"), set with
// SetMCPAccess or POST /control/mcp_access.
type MCPAccess struct {
	BotID string `json:"bot_id"`
	// BizType is the business type authorized: "msg" when empty.
	BizType string `json:"biz_type,omitempty"`
	// Authorized: an admin authorized the bot's capability. Off (the
	// default): every tool call of the business type is answered errcode
	// 850001.
	Authorized bool `json:"authorized"`
	// Scope is what the history covers: MCPScopeBot (default) or
	// MCPScopeMember.
	Scope string `json:"scope,omitempty"`
	// Members are the members who authorized the bot to read their
	// history (MCPScopeMember only).
	Members []string `json:"members,omitempty"`
}

// History scopes. Which one WeCom applies is not documented; the
// official plugin's source assumes the member scope (see docs/wecom-protocol.md).
const (
	// MCPScopeBot: the history is the bot's own conversations, every
	// message users sent it, in single and group chats.
	MCPScopeBot = "bot"
	// MCPScopeMember: the history is an authorizing member's: the tools
	// answer only a call carrying MCPRequesterHeader of a member in
	// Members, with the chats that member took part in; a call without
	// the header is refused (errcode 40058).
	MCPScopeMember = "member"
)

// SetMCPAccess sets a bot's authorization of a business type.
func (s *Server) SetMCPAccess(a MCPAccess) error {
	if _, err := s.needBot(a.BotID); err != nil {
		return err
	}
	if a.BizType == "" {
		a.BizType = "msg"
	}
	if _, ok := mcpBizTypes[a.BizType]; !ok {
		return invalid("biz_type %q: the simulator serves %v", a.BizType, slices.Sorted(maps.Keys(mcpBizTypes)))
	}
	switch a.Scope {
	case "", MCPScopeBot, MCPScopeMember:
	default:
		return invalid("scope %q: want %q or %q", a.Scope, MCPScopeBot, MCPScopeMember)
	}
	if a.Scope == MCPScopeMember && len(a.Members) == 0 {
		return invalid("scope \"member\" needs members: the userids that authorized the bot")
	}
	s.mcp.mu.Lock()
	defer s.mcp.mu.Unlock()
	if s.mcp.access == nil {
		s.mcp.access = map[mcpEndpoint]MCPAccess{}
	}
	s.mcp.access[mcpEndpoint{bot: a.BotID, bizType: a.BizType}] = a
	return nil
}

// mcpAccessOf is bot's authorization of bizType now.
func (s *Server) mcpAccessOf(bot, bizType string) MCPAccess {
	s.mcp.mu.Lock()
	defer s.mcp.mu.Unlock()
	a, ok := s.mcp.access[mcpEndpoint{bot: bot, bizType: bizType}]
	if !ok {
		a = MCPAccess{BotID: bot, BizType: bizType}
	}
	if a.Scope == "" {
		a.Scope = MCPScopeBot
	}
	return a
}

// authorize is the caller's authorization of its business type: an error
// (the tool's business refusal) when the bot is not authorized, or the
// member scope's call names no authorizing member.
func (s *Server) authorize(cc mcpCall) (MCPAccess, error) {
	acc := s.mcpAccessOf(cc.bot, cc.bizType)
	switch {
	case !acc.Authorized:
		return acc, &mcpBizError{code: ErrCodeMCPUnauthorized, msg: "the bot is not authorized for " + cc.bizType + ": an admin must authorize it"}
	case acc.Scope == MCPScopeMember && cc.requester == "":
		return acc, &mcpBizError{code: wecom.ErrCodeInvalidParam, msg: cc.bizType + " answers an authorizing member only: call with " + MCPRequesterHeader}
	case acc.Scope == MCPScopeMember && !slices.Contains(acc.Members, cc.requester):
		return acc, &mcpBizError{code: ErrCodeMCPUnauthorized, msg: "member " + quote(cc.requester) + " has not authorized the bot for " + cc.bizType}
	}
	return acc, nil
}

// mcpConfig answers aibot_get_mcp_config: the URL of the business type's
// server for the connection's bot, on the host the bot connected to.
func (c *conn) mcpConfig(b *bot, f *wecom.Frame) {
	var body struct {
		BizType string `json:"biz_type"`
	}
	if err := decodeBody(f.Body, &body); err != nil || body.BizType == "" {
		c.ack(f.Headers.ReqID, wecom.ErrCodeInvalidParam, CmdGetMCPConfig+": body must be {\"biz_type\":…}", nil)
		return
	}
	if _, ok := mcpBizTypes[body.BizType]; !ok {
		c.ack(f.Headers.ReqID, wecom.ErrCodeInvalidParam, CmdGetMCPConfig+": unknown biz_type "+quote(body.BizType), nil)
		return
	}
	token := c.s.mcpToken(mcpEndpoint{bot: b.id, bizType: body.BizType})
	c.ack(f.Headers.ReqID, 0, "", map[string]string{"url": c.base + "/mcp/" + token})
}

// mcpToken is the token of a bot's server of a business type, minted
// once.
func (s *Server) mcpToken(e mcpEndpoint) string {
	s.mcp.mu.Lock()
	defer s.mcp.mu.Unlock()
	if t, ok := s.mcp.byBot[e]; ok {
		return t
	}
	if s.mcp.tokens == nil {
		s.mcp.tokens, s.mcp.byBot, s.mcp.sessions = map[string]mcpEndpoint{}, map[mcpEndpoint]string{}, map[string]string{}
	}
	t := newID("mcp")
	s.mcp.tokens[t], s.mcp.byBot[e] = e, t
	return t
}

// rpcRequest and rpcResponse are JSON-RPC 2.0's.
type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// JSON-RPC error codes.
const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
)

// mcpProtocolVersion is the version the simulator speaks (the one the
// official plugin asks for).
const mcpProtocolVersion = "2025-03-26"

// httpMCP serves POST /mcp/{token}: one JSON-RPC request (or
// notification) per POST, answered as application/json.
func (s *Server) httpMCP(w http.ResponseWriter, r *http.Request) {
	token := r.PathValue("token")
	s.mcp.mu.Lock()
	ep, ok := s.mcp.tokens[token]
	s.mcp.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "no MCP server at this URL: ask for one with "+CmdGetMCPConfig)
		return
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "read body: "+err.Error())
		return
	}
	var req rpcRequest
	if err := json.Unmarshal(raw, &req); err != nil || req.JSONRPC != "2.0" || req.Method == "" {
		writeRPC(w, rpcResponse{ID: json.RawMessage("null"), Error: &rpcError{Code: rpcParseError, Message: "want one JSON-RPC 2.0 request object"}})
		return
	}
	if req.Method == "initialize" {
		sid := newID("sess")
		s.mcp.mu.Lock()
		s.mcp.sessions[sid] = token
		s.mcp.mu.Unlock()
		w.Header().Set("Mcp-Session-Id", sid)
		writeRPC(w, rpcResponse{ID: req.ID, Result: map[string]any{
			"protocolVersion": mcpProtocolVersion,
			"capabilities":    map[string]any{"tools": map[string]any{}},
			"serverInfo":      map[string]any{"name": "wecomsim-" + ep.bizType, "version": "1"},
		}})
		return
	}
	s.mcp.mu.Lock()
	sessionToken, ok := s.mcp.sessions[r.Header.Get("Mcp-Session-Id")]
	s.mcp.mu.Unlock()
	if !ok || sessionToken != token {
		// The plugin initializes again on a 404.
		writeError(w, http.StatusNotFound, "unknown Mcp-Session-Id: send initialize first")
		return
	}
	if len(req.ID) == 0 { // a notification (notifications/initialized)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	writeRPC(w, s.mcpCall(ep, mcpCall{bot: ep.bot, bizType: ep.bizType, requester: r.Header.Get(MCPRequesterHeader)}, req))
}

// mcpCall answers one JSON-RPC request to ep's server.
func (s *Server) mcpCall(ep mcpEndpoint, cc mcpCall, req rpcRequest) rpcResponse {
	tools := mcpBizTypes[ep.bizType]
	out := rpcResponse{ID: req.ID}
	switch req.Method {
	case "ping":
		out.Result = map[string]any{}
	case "tools/list":
		list := []map[string]any{}
		for _, name := range slices.Sorted(maps.Keys(tools)) {
			list = append(list, map[string]any{"name": name, "description": tools[name].description, "inputSchema": tools[name].inputSchema})
		}
		out.Result = map[string]any{"tools": list}
	case "tools/call":
		var p struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal(req.Params, &p); err != nil || p.Name == "" {
			out.Error = &rpcError{Code: rpcInvalidParams, Message: "tools/call: params must be {\"name\":…,\"arguments\":{…}}"}
			return out
		}
		t, ok := tools[p.Name]
		if !ok {
			out.Error = &rpcError{Code: rpcInvalidParams, Message: fmt.Sprintf("unknown tool %q of %s", p.Name, ep.bizType)}
			return out
		}
		if len(p.Arguments) == 0 {
			p.Arguments = json.RawMessage("{}")
		}
		out.Result = toolResult(t.handler.call(s, cc, p.Arguments))
	default:
		out.Error = &rpcError{Code: rpcMethodNotFound, Message: "method not found: " + req.Method}
	}
	return out
}

// toolResult is a tool's business outcome as MCP's CallToolResult: one
// text content holding {"errcode":…,"errmsg":…, …the result's fields}.
func toolResult(v any, err error) map[string]any {
	body := map[string]any{"errcode": 0, "errmsg": "ok"}
	if be, ok := err.(*mcpBizError); ok {
		body = map[string]any{"errcode": be.code, "errmsg": be.msg}
	} else if err != nil {
		body = map[string]any{"errcode": wecom.ErrCodeSystemBusy, "errmsg": err.Error()}
	} else if raw, err := json.Marshal(v); err == nil {
		_ = json.Unmarshal(raw, &body)
		body["errcode"], body["errmsg"] = 0, "ok"
	}
	text, _ := json.Marshal(body)
	return map[string]any{"content": []map[string]any{{"type": "text", "text": string(text)}}}
}

func writeRPC(w http.ResponseWriter, resp rpcResponse) {
	resp.JSONRPC = "2.0"
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// httpMCPAccess serves POST /control/mcp_access (MCPAccess).
func (s *Server) httpMCPAccess(w http.ResponseWriter, r *http.Request) {
	var a MCPAccess
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&a); err != nil {
		writeError(w, http.StatusBadRequest, "body must be {\"bot_id\":…,\"biz_type\":\"msg\"|\"todo\",\"authorized\":bool,\"scope\":\"bot\"|\"member\",\"members\":[…]}")
		return
	}
	if err := s.SetMCPAccess(a); err != nil {
		writeErr(w, err)
		return
	}
	if a.BizType == "" {
		a.BizType = "msg"
	}
	httpjson.Write(w, http.StatusOK, s.mcpAccessOf(a.BotID, a.BizType))
}
