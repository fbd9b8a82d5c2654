package ai

import (
	"context"
	"strings"
)

// The thinking channel: what a model reasons and which tools an agent
// calls on its way to the answer, beside the answer's text and, like a
// Reply or Usage, beside the Backend interface rather than in it.
//
// A backend that sees its model's reasoning calls Think with the context
// it was given, and ThinkTool for each step of a tool; the caller that
// wants them puts a sink on that context first (WithThinking). Without a
// sink both do nothing. Both are called, like emit, from the goroutine
// that called Stream, in order, and never after Stream returned; the
// sink sees valid UTF-8 only.
//
// Who sends: openai (a delta's reasoning_content, or reasoning, as
// DeepSeek, Qwen, vLLM and OpenRouter send it), dify (agent_thought
// events: the thought, and the tool's start and end), http ({"thinking":
// "<delta>"} and {"tool": {"name", "status"}} lines) and the demo. exec
// sends none.

// Tool step statuses.
const (
	ToolStarted = "started"
	ToolDone    = "done"
	ToolFailed  = "failed"
)

// ToolStep is one step of an agent's tool: its name and where it is.
type ToolStep struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ToolStarted, ToolDone or ToolFailed
}

// Line is the step as the user reads it: one line, "🔧 search: done".
func (s ToolStep) Line() string {
	return "🔧 " + singleLine(s.Name) + ": " + singleLine(s.Status)
}

// Thought is one piece of what the sink receives: a delta of the model's
// reasoning (Text), or a step of a tool (Tool non-nil, Text empty).
type Thought struct {
	Text string
	Tool *ToolStep
}

type thinkingKey struct{}

// WithThinking is ctx carrying sink: Stream called with it hands its
// thinking to sink.
func WithThinking(ctx context.Context, sink func(Thought)) context.Context {
	return context.WithValue(ctx, thinkingKey{}, sink)
}

// Think hands a delta of the model's reasoning to ctx's sink, if it has one.
func Think(ctx context.Context, delta string) {
	sink, _ := ctx.Value(thinkingKey{}).(func(Thought))
	if sink == nil || delta == "" {
		return
	}
	sink(Thought{Text: strings.ToValidUTF8(delta, "\uFFFD")})
}

// ThinkTool hands a step of a tool to ctx's sink, if it has one. A step
// without a name is dropped; a status other than the three is kept as
// sent (a webhook's word), on one line.
func ThinkTool(ctx context.Context, step ToolStep) {
	sink, _ := ctx.Value(thinkingKey{}).(func(Thought))
	if sink == nil || strings.TrimSpace(step.Name) == "" {
		return
	}
	step.Name = strings.ToValidUTF8(strings.TrimSpace(step.Name), "\uFFFD")
	step.Status = strings.ToValidUTF8(strings.TrimSpace(step.Status), "\uFFFD")
	sink(Thought{Tool: &step})
}

// singleLine is s with its line breaks made spaces.
func singleLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
