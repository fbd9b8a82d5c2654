package ai

import (
	"context"
	"encoding/json"
)

// Tools are WeCom's own tools (its MCP servers: msg, todo, …) as a
// backend may offer them to its model: those the bot's ai.tools lets
// through, run by the node's MCP gateway (pkg/mcpgw), which audits every
// call. A backend that offers them does so only when the bot's ai.tools
// names some and New was given WithTools.
type Tools interface {
	// List is the tools bot's allowlist lets through, for user (the
	// WeCom userid the answer is for). A business type whose server is
	// not reachable is left out; the error says which, beside the rest.
	List(ctx context.Context, bot, user string) ([]Tool, error)
	// Call runs one tool for user and returns its result as WeCom's
	// server said it (its text, an errcode in it when WeCom refused);
	// an error when the gateway did not run it (refused, unavailable).
	Call(ctx context.Context, bot, user, name string, args json.RawMessage) (string, error)
}

// Tool is one tool a backend may offer.
type Tool struct {
	Name        string          // BIZ_TYPE/TOOL, e.g. msg/get_message
	Description string          // WeCom's
	Parameters  json.RawMessage // its arguments' JSON schema
}

// WithTools is the node's MCP gateway, which the openai backend offers
// the bot's allowed tools through. Without it, no backend offers any.
func WithTools(t Tools) Option { return func(o *options) { o.tools = t } }
