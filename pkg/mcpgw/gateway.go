// Package mcpgw is the WeCom MCP gateway: WeCom's own tools (the MCP
// servers a bot's long connection names: msg, todo, doc, …) offered to
// every agent of the bot, on every node, and not only to the node that
// holds the connection.
//
// The holder asks WeCom for the URL of each business type the bot's
// ai.tools names and shares it in etcd (share.go). Every node serves
// Path, an MCP Streamable-HTTP endpoint (http.go) whose tools/list is the
// business type's tools the allowlist lets through and whose tools/call
// is forwarded to WeCom's server; a tool outside the allowlist is
// refused. Every call is audited (audit.go): bot, agent, tool, outcome
// and duration, never what it carried. The openai backend calls the
// same gateway in process (tools.go).
package mcpgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/mcpclient"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// RequesterHeader carries the WeCom userid of the person on whose behalf
// a tool is called (the official plugin's header). An agent sends it to
// the gateway; the gateway passes it on to WeCom, whose member-scoped
// authorization answers only for members who authorized the bot.
const RequesterHeader = mcpclient.RequesterHeader

// Allowlist is what the gateway asks of the node's bots: a bot's
// ai.tools now, and whether this node serves the bot at all.
type Allowlist interface {
	Tools(bot string) (tools []string, served bool)
}

// Defaults of Options.
const (
	// DefaultMaxAge is how long a URL WeCom gave is used; its holder
	// asks again after half of it.
	DefaultMaxAge = time.Hour
	// DefaultRefreshEvery is how often the holder looks at its records
	// (a missing, old or another term's one is asked for again).
	DefaultRefreshEvery = 30 * time.Second
)

// Options configure a Gateway.
type Options struct {
	Node  string // this node's id, in the records it writes
	Etcd  *clientv3.Client
	Keys  etcdkeys.Layout // zero: etcdkeys.Default
	Allow Allowlist
	// NodeToken opens the gateway as the agent NodeAgent; AgentTokens
	// (token → agent name, api.agent_tokens_file) each as its agent.
	NodeToken   string
	AgentTokens map[string]string
	HTTP        *http.Client // to WeCom's servers (pkg/mcpclient); nil: a 30 s timeout
	Clock       clock.Clock  // nil: clock.Real
	Registry    prometheus.Registerer
	Logger      zerolog.Logger
	// MaxAge and RefreshEvery: 0 is DefaultMaxAge, DefaultRefreshEvery.
	MaxAge, RefreshEvery time.Duration
}

// NodeAgent is the agent the audit names for a call made with the node
// API's token.
const NodeAgent = "node-token"

// Gateway is one node's MCP gateway.
type Gateway struct {
	node         string
	etcd         *clientv3.Client
	keys         etcdkeys.Layout
	allow        Allowlist
	auth         *auth
	client       *mcpclient.Client
	clock        clock.Clock
	log          zerolog.Logger
	audit        *audit
	maxAge       time.Duration
	refreshEvery time.Duration
}

// New makes a node's gateway.
func New(o Options) *Gateway {
	g := &Gateway{node: o.Node, etcd: o.Etcd, keys: o.Keys, allow: o.Allow, auth: newAuth(o.NodeToken, o.AgentTokens),
		client: mcpclient.New(mcpclient.Options{HTTP: o.HTTP}), clock: clock.Or(o.Clock), log: o.Logger.With().Str("component", "mcp_gateway").Logger(),
		maxAge: o.MaxAge, refreshEvery: o.RefreshEvery}
	if g.keys.Root == "" {
		g.keys = etcdkeys.Default
	}
	if g.maxAge <= 0 {
		g.maxAge = DefaultMaxAge
	}
	if g.refreshEvery <= 0 {
		g.refreshEvery = DefaultRefreshEvery
	}
	g.audit = newAudit(o.Registry, g.log)
	return g
}

// Tool is one of WeCom's tools as MCP lists it.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
}

// allowed reports whether tools (ai.tools) lets biz's tool through.
func allowed(tools []string, biz, tool string) bool {
	if strings.Contains(biz, "/") || tool == "" {
		return false
	}
	return slices.Contains(tools, biz) || slices.Contains(tools, biz+"/"+tool)
}

// bizAllowed reports whether tools names biz or one of its tools.
func bizAllowed(tools []string, biz string) bool {
	return slices.ContainsFunc(tools, func(t string) bool { b, _, _ := strings.Cut(t, "/"); return b == biz })
}

// ListTool is what the audit names a tools/list of a business type in
// place of a tool's name: its tool label is BIZ_TYPE/tools/list
// ("msg/tools/list"), which no tool's can be (a tool's name has no "/").
const ListTool = "tools/list"

// list is biz's tools the bot's allowlist lets through, for c's agent,
// audited as c's tool ListTool: the outcome ok, unavailable (no URL
// shared), wecom_error (WeCom's server answered a JSON-RPC error) or
// failed.
func (g *Gateway) list(ctx context.Context, c toolCall, tools []string) ([]Tool, error) {
	start := g.clock.Now()
	c.tool, c.args = ListTool, nil
	list, outcome, err := g.listOnce(ctx, c, tools)
	g.audit.record(c, outcome, g.clock.Since(start), err)
	return list, err
}

func (g *Gateway) listOnce(ctx context.Context, c toolCall, tools []string) ([]Tool, string, error) {
	url, _, err := g.url(ctx, c.bot, c.biz)
	if err != nil {
		return nil, OutcomeUnavailable, err
	}
	var out []Tool
	cursor := ""
	for range maxListPages {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		raw, err := g.client.Call(ctx, url, c.requester, "tools/list", params)
		var rf *mcpclient.RPCError
		switch {
		case errors.As(err, &rf):
			return nil, OutcomeWeComError, err
		case err != nil:
			return nil, OutcomeFailed, err
		}
		var page struct {
			Tools      []Tool `json:"tools"`
			NextCursor string `json:"nextCursor"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return nil, OutcomeFailed, fmt.Errorf("WeCom's MCP server's tools/list is not a list of tools: %w", err)
		}
		for _, t := range page.Tools {
			if allowed(tools, c.biz, t.Name) {
				out = append(out, t)
			}
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	return out, OutcomeOK, nil
}

// maxListPages bounds the pages of one tools/list.
const maxListPages = 20

// Outcomes of a tool call or list (botctl_mcp_tool_calls_total's outcome).
const (
	OutcomeOK          = "ok"          // WeCom answered errcode 0
	OutcomeWeComError  = "wecom_error" // WeCom answered the call with an errcode (not authorized, bad arguments, …), or the list with a JSON-RPC error
	OutcomeRefused     = "refused"     // not in the bot's ai.tools
	OutcomeUnavailable = "unavailable" // no URL shared: the bot not held, or WeCom refused the URL
	OutcomeFailed      = "failed"      // WeCom's server failed or did not answer
)

// call runs one call of biz's tool for agent and audits it: the result
// as WeCom answered it, or an error with its outcome.
func (g *Gateway) call(ctx context.Context, c toolCall) (json.RawMessage, string, error) {
	start := g.clock.Now()
	res, outcome, err := g.callOnce(ctx, c)
	g.audit.record(c, outcome, g.clock.Since(start), err)
	return res, outcome, err
}

// toolCall is one call: who, for whom, which tool, with what.
type toolCall struct {
	bot, agent, biz, tool, requester string
	args                             json.RawMessage
}

func (g *Gateway) callOnce(ctx context.Context, c toolCall) (json.RawMessage, string, error) {
	tools, served := g.allow.Tools(c.bot)
	if !served || !allowed(tools, c.biz, c.tool) {
		return nil, OutcomeRefused, &refusal{bot: c.bot, tool: c.biz + "/" + c.tool}
	}
	url, rev, err := g.url(ctx, c.bot, c.biz)
	if err != nil {
		return nil, OutcomeUnavailable, err
	}
	args := c.args
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	res, err := g.client.Call(ctx, url, c.requester, "tools/call", map[string]any{"name": c.tool, "arguments": args})
	if err != nil {
		return nil, OutcomeFailed, err
	}
	code := errCode(res)
	if code == errCodeMCPUnauthorized || code == errCodeMCPAuthReset {
		g.forget(context.WithoutCancel(ctx), c.bot, c.biz, rev)
	}
	if code != 0 {
		return res, OutcomeWeComError, nil
	}
	return res, OutcomeOK, nil
}

// refusal is a call of a tool outside the bot's ai.tools.
type refusal struct{ bot, tool string }

func (r *refusal) Error() string {
	return "tool " + r.tool + " is not in bot " + r.bot + "'s ai.tools: refused"
}

// errCode is the errcode WeCom put in a tool's result: its text content
// {"errcode":…} (0 when none), or -1 for a result marked isError without
// one.
func errCode(raw json.RawMessage) int {
	var res struct {
		IsError bool `json:"isError"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if json.Unmarshal(raw, &res) != nil {
		return -1
	}
	for _, c := range res.Content {
		var biz struct {
			ErrCode *int `json:"errcode"`
		}
		if c.Type == "text" && json.Unmarshal([]byte(c.Text), &biz) == nil && biz.ErrCode != nil {
			return *biz.ErrCode
		}
	}
	if res.IsError {
		return -1
	}
	return 0
}
