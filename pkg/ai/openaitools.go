package ai

import (
	"context"
	"encoding/json"
	"regexp"
	"sort"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
)

// The openai backend's function calls: the bot's allowed WeCom tools
// (ai.tools, run by the node's MCP gateway: Tools) offered to the model
// as functions. When the model asks for some, each is run through the
// gateway, its result handed back as the tool's message, and the model
// asked again for the rest of the answer, at most openAIToolRounds
// times; the last round offers no tools, so that the model answers. A
// tool that fails is the model's to read ("error: …"), not the answer's
// end. Each call is a tool step of the answer's thinking (ThinkTool).

// openAIToolRounds bounds the rounds of tool calls of one answer.
const openAIToolRounds = 4

// openAIFuncRE is a function's name as OpenAI's API accepts it.
var openAIFuncRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// funcName is a tool's function name: BIZ_TYPE/TOOL as BIZ_TYPE__TOOL.
func funcName(tool string) string { return strings.ReplaceAll(tool, "/", "__") }

// offer adds the tools the gateway lists for req's bot and user to p and
// returns them by function name (none when the bot has no ai.tools, the
// backend no gateway, or the gateway lists none: the answer goes on
// without).
func (b *openAIBackend) offer(ctx context.Context, req Request, p *openai.ChatCompletionNewParams) map[string]string {
	if b.tools == nil || req.Bot == "" {
		return nil
	}
	list, _ := b.tools.List(ctx, req.Bot, req.User) // a business type not listed is left out
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	byFunc := map[string]string{}
	for _, t := range list {
		name := funcName(t.Name)
		if !openAIFuncRE.MatchString(name) || byFunc[name] != "" {
			continue
		}
		params := shared.FunctionParameters{}
		if json.Unmarshal(t.Parameters, &params) != nil || len(params) == 0 {
			params = shared.FunctionParameters{"type": "object"}
		}
		def := shared.FunctionDefinitionParam{Name: name, Parameters: params}
		if t.Description != "" {
			def.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(def))
		byFunc[name] = t.Name
	}
	if len(byFunc) == 0 {
		return nil
	}
	return byFunc
}

// toolCall is one function call the model asked for, as the stream's
// deltas built it.
type toolCall struct {
	id, name string
	args     strings.Builder
}

// toolCalls gathers a stream's tool-call deltas by their index.
type toolCalls struct {
	byIndex map[int64]*toolCall
	order   []int64
}

func (tc *toolCalls) add(d openai.ChatCompletionChunkChoiceDeltaToolCall) {
	if tc.byIndex == nil {
		tc.byIndex = map[int64]*toolCall{}
	}
	c := tc.byIndex[d.Index]
	if c == nil {
		c = &toolCall{}
		tc.byIndex[d.Index] = c
		tc.order = append(tc.order, d.Index)
	}
	if d.ID != "" {
		c.id = d.ID
	}
	c.name += d.Function.Name
	c.args.WriteString(d.Function.Arguments)
}

func (tc *toolCalls) list() []*toolCall {
	out := make([]*toolCall, 0, len(tc.order))
	for _, i := range tc.order {
		out = append(out, tc.byIndex[i])
	}
	return out
}

// runTools runs calls through the gateway and adds the model's turn (its
// text and its calls) and each result to p's messages.
func (b *openAIBackend) runTools(ctx context.Context, req Request, p *openai.ChatCompletionNewParams, offered map[string]string, text string, calls []*toolCall) {
	asst := openai.ChatCompletionAssistantMessageParam{}
	if text != "" {
		asst.Content.OfString = openai.String(text)
	}
	for _, c := range calls {
		asst.ToolCalls = append(asst.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
			ID: c.id, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.name, Arguments: c.args.String()}}})
	}
	p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &asst})
	for _, c := range calls {
		p.Messages = append(p.Messages, openai.ToolMessage(b.runTool(ctx, req, offered, c), c.id))
	}
}

// runTool runs one call and returns what the model reads of it.
func (b *openAIBackend) runTool(ctx context.Context, req Request, offered map[string]string, c *toolCall) string {
	tool := offered[c.name]
	if tool == "" {
		return "error: no tool " + c.name + " was offered"
	}
	args := strings.TrimSpace(c.args.String())
	if args == "" {
		args = "{}"
	}
	if !json.Valid([]byte(args)) {
		return "error: the arguments are not JSON"
	}
	ThinkTool(ctx, ToolStep{Name: tool, Status: ToolStarted})
	out, err := b.tools.Call(ctx, req.Bot, req.User, tool, json.RawMessage(args))
	if err != nil {
		ThinkTool(ctx, ToolStep{Name: tool, Status: ToolFailed})
		return "error: " + err.Error()
	}
	ThinkTool(ctx, ToolStep{Name: tool, Status: ToolDone})
	return out
}
