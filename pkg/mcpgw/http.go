package mcpgw

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"

	"github.com/botctl/botctl/internal/httpjson"
	"github.com/botctl/botctl/pkg/buildinfo"
	"github.com/botctl/botctl/pkg/mcpclient"
)

// The gateway's endpoint: MCP's Streamable HTTP, stateless. Every POST
// is one JSON-RPC request (or notification) answered as
// application/json; the gateway gives no Mcp-Session-Id, so that an
// agent behind a load balancer may reach any node with any request. GET
// (a server's stream) is not offered (405, as the transport allows) and
// DELETE has no session to end.

// Path is the endpoint's route (Go 1.22 pattern).
const Path = "/v1/bots/{bot}/mcp/{biz_type}"

// URL is the endpoint's path for bot's bizType.
func URL(bot, bizType string) string { return "/v1/bots/" + bot + "/mcp/" + bizType }

// maxRequestBytes bounds one request's body.
const maxRequestBytes = 1 << 20

// JSON-RPC error codes the gateway answers.
const (
	rpcParseError     = -32700
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
	// rpcRefused: the tool is not in the bot's ai.tools.
	rpcRefused = -32001
	// rpcUnavailable: the bot's URL is not shared (yet), or WeCom's
	// server failed: the call may succeed later.
	rpcUnavailable = -32002
)

// protocolVersions are the MCP versions the gateway answers in; a client
// asking for another is answered in the first.
var protocolVersions = []string{"2025-06-18", "2025-03-26", "2024-11-05"}

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
	Error   *rpcFailure     `json:"error,omitempty"`
}

// Routes mounts the endpoint on mux.
func (g *Gateway) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+Path, g.serveRPC)
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		mux.HandleFunc(m+" "+Path, func(w http.ResponseWriter, r *http.Request) {
			if g.authorized(w, r) == "" {
				return
			}
			w.Header().Set("Allow", http.MethodPost)
			httpjson.WriteIndented(w, http.StatusMethodNotAllowed, map[string]string{"error": "this MCP endpoint is stateless: POST one JSON-RPC request at a time (no server stream, no session to end)"})
		})
	}
}

// authorized is the agent r's token names; "" (answered 401) when none.
func (g *Gateway) authorized(w http.ResponseWriter, r *http.Request) string {
	agent := g.auth.agent(r)
	if agent == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="botctl MCP gateway"`)
		httpjson.WriteIndented(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong bearer token: send Authorization: Bearer <token>, " +
			"the node API's token or an agent's of api.agent_tokens_file"})
	}
	return agent
}

func (g *Gateway) serveRPC(w http.ResponseWriter, r *http.Request) {
	agent := g.authorized(w, r)
	if agent == "" {
		return
	}
	bot, biz := r.PathValue("bot"), r.PathValue("biz_type")
	tools, served := g.allow.Tools(bot)
	if !served {
		httpjson.WriteIndented(w, http.StatusNotFound, map[string]string{"error": "bot " + bot + " is not served by this node"})
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		httpjson.WriteIndented(w, http.StatusRequestEntityTooLarge, map[string]string{"error": "a request of at most 1 MiB"})
		return
	}
	var req rpcRequest
	err = json.Unmarshal(raw, &req)
	c := toolCall{bot: bot, agent: agent, biz: biz, requester: r.Header.Get(RequesterHeader)}
	if !bizAllowed(tools, biz) {
		g.refuseBiz(c, req)
		httpjson.WriteIndented(w, http.StatusForbidden, map[string]string{"error": "business type " + biz + " is in no entry of bot " + bot + "'s ai.tools: refused"})
		return
	}
	if err != nil || req.JSONRPC != "2.0" || req.Method == "" {
		writeRPC(w, rpcResponse{ID: json.RawMessage("null"), Error: &rpcFailure{Code: rpcParseError, Message: "want one JSON-RPC 2.0 request object (batches are not supported)"}})
		return
	}
	if len(req.ID) == 0 { // a notification: nothing to answer
		w.WriteHeader(http.StatusAccepted)
		return
	}
	writeRPC(w, g.answer(r.Context(), c, tools, req))
}

// refuseBiz audits a tools/call or tools/list of a business type in no
// entry of the bot's ai.tools as refused (a made-up name as "invalid");
// any other request of it is refused unaudited.
func (g *Gateway) refuseBiz(c toolCall, req rpcRequest) {
	switch req.Method {
	case "tools/list":
		c.tool = ListTool
	case "tools/call":
		var p struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(req.Params, &p) // no name: counted as "invalid"
		c.tool = p.Name
	default:
		return
	}
	g.audit.record(c, OutcomeRefused, 0, &refusal{bot: c.bot, tool: c.biz + "/" + c.tool})
}

// answer is the gateway's answer to one request of c's agent.
func (g *Gateway) answer(ctx context.Context, c toolCall, tools []string, req rpcRequest) rpcResponse {
	out := rpcResponse{ID: req.ID}
	switch req.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(req.Params, &p)
		v := protocolVersions[0]
		if slices.Contains(protocolVersions, p.ProtocolVersion) {
			v = p.ProtocolVersion
		}
		out.Result = map[string]any{"protocolVersion": v, "capabilities": map[string]any{"tools": map[string]any{"listChanged": false}},
			"serverInfo": map[string]any{"name": "botctl-wecom-" + c.biz, "version": buildinfo.Get().Version}}
	case "ping":
		out.Result = map[string]any{}
	case "tools/list":
		list, err := g.list(ctx, c, tools)
		if err != nil {
			out.Error = unavailable(err)
			return out
		}
		if list == nil {
			list = []Tool{}
		}
		out.Result = map[string]any{"tools": list}
	case "tools/call":
		var p struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal(req.Params, &p); err != nil || p.Name == "" {
			out.Error = &rpcFailure{Code: rpcInvalidParams, Message: "tools/call: params must be {\"name\":…,\"arguments\":{…}}"}
			return out
		}
		c.tool, c.args = p.Name, p.Arguments
		res, outcome, err := g.call(ctx, c)
		switch outcome {
		case OutcomeRefused:
			out.Error = &rpcFailure{Code: rpcRefused, Message: err.Error()}
		case OutcomeOK, OutcomeWeComError:
			out.Result = res
		default:
			out.Error = unavailable(err)
		}
	default:
		out.Error = &rpcFailure{Code: rpcMethodNotFound, Message: "method not found: " + req.Method + " (the gateway offers tools only)"}
	}
	return out
}

// rpcFailure is a JSON-RPC error the gateway answers.
type rpcFailure struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// unavailable is err as a JSON-RPC error: WeCom's own JSON-RPC error as
// it said it, anything else a call that may succeed later.
func unavailable(err error) *rpcFailure {
	var rf *mcpclient.RPCError
	if errors.As(err, &rf) {
		return &rpcFailure{Code: rf.Code, Message: rf.Message}
	}
	return &rpcFailure{Code: rpcUnavailable, Message: err.Error()}
}

func writeRPC(w http.ResponseWriter, resp rpcResponse) {
	resp.JSONRPC = "2.0"
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}
