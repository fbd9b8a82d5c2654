package mcpgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/botctl/botctl/pkg/ai"
)

// Backend is the gateway as a backend of this node calls it in process
// (ai.Tools): the same allowlist, the same audit, the agent named
// agent.
func (g *Gateway) Backend(agent string) ai.Tools { return backendTools{g: g, agent: agent} }

type backendTools struct {
	g     *Gateway
	agent string
}

// List is every allowed tool of every business type bot's ai.tools
// names; a business type that cannot be listed is left out and named in
// the error.
func (b backendTools) List(ctx context.Context, bot, user string) ([]ai.Tool, error) {
	tools, served := b.g.allow.Tools(bot)
	if !served {
		return nil, fmt.Errorf("bot %s is not served by this node", bot)
	}
	var out []ai.Tool
	var errs []error
	for _, biz := range BizTypes(tools) {
		list, err := b.g.list(ctx, toolCall{bot: bot, agent: b.agent, biz: biz, requester: user}, tools)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", biz, err))
			continue
		}
		for _, t := range list {
			out = append(out, ai.Tool{Name: biz + "/" + t.Name, Description: t.Description, Parameters: t.InputSchema})
		}
	}
	return out, errors.Join(errs...)
}

// Call runs name (BIZ_TYPE/TOOL) and returns its result's text.
func (b backendTools) Call(ctx context.Context, bot, user, name string, args json.RawMessage) (string, error) {
	biz, tool, _ := strings.Cut(name, "/")
	res, outcome, err := b.g.call(ctx, toolCall{bot: bot, agent: b.agent, biz: biz, tool: tool, requester: user, args: args})
	if outcome != OutcomeOK && outcome != OutcomeWeComError {
		return "", err
	}
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if json.Unmarshal(res, &r) != nil {
		return string(res), nil
	}
	var texts []string
	for _, c := range r.Content {
		if c.Type == "text" {
			texts = append(texts, c.Text)
		}
	}
	return strings.Join(texts, "\n"), nil
}
