package ai

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// listedTools is a gateway that lists fixed tools and answers each call
// with its name, or refuses one.
type listedTools struct {
	tools   []Tool
	refuse  string
	calls   []string
	gotArgs []string
}

func (l *listedTools) List(context.Context, string, string) ([]Tool, error) { return l.tools, nil }
func (l *listedTools) Call(_ context.Context, _, _, name string, args json.RawMessage) (string, error) {
	l.calls, l.gotArgs = append(l.calls, name), append(l.gotArgs, string(args))
	if name == l.refuse {
		return "", errors.New("tool " + name + " is not in bot b1's ai.tools: refused")
	}
	return `{"errcode":0,"tool":"` + name + `"}`, nil
}

// Only tools whose function name OpenAI accepts are offered, each once;
// a call of a tool not offered, or with arguments that are not JSON, is
// answered to the model as an error without reaching the gateway; a
// gateway's refusal is the model's to read.
func TestOpenAIToolCalls(t *testing.T) {
	gw := &listedTools{tools: []Tool{{Name: "msg/get_message", Parameters: json.RawMessage(`{"type":"object","properties":{"chatid":{"type":"string"}}}`)},
		{Name: "msg/bad name"}, {Name: "todo/create_todo", Description: "创建待办"}}, refuse: "todo/create_todo"}
	b := &openAIBackend{tools: gw}
	var p openai.ChatCompletionNewParams
	offered := b.offer(context.Background(), Request{Bot: "b1", User: "alice"}, &p)
	if len(offered) != 2 || offered["msg__get_message"] != "msg/get_message" || offered["todo__create_todo"] != "todo/create_todo" || len(p.Tools) != 2 {
		t.Fatalf("offered %v (%d tools)", offered, len(p.Tools))
	}
	call := func(name, args string) string {
		c := &toolCall{id: "c", name: name}
		c.args.WriteString(args)
		return b.runTool(context.Background(), Request{Bot: "b1", User: "alice"}, offered, c)
	}
	if got := call("msg__get_message", ""); !strings.Contains(got, `"tool":"msg/get_message"`) || gw.gotArgs[0] != "{}" {
		t.Errorf("a call without arguments: %q (args %q)", got, gw.gotArgs)
	}
	if got := call("msg__send_message", "{}"); !strings.HasPrefix(got, "error: no tool") {
		t.Errorf("a tool not offered: %q", got)
	}
	if got := call("msg__get_message", "{not json"); !strings.HasPrefix(got, "error: the arguments are not JSON") {
		t.Errorf("arguments not JSON: %q", got)
	}
	if got := call("todo__create_todo", "{}"); !strings.Contains(got, "refused") {
		t.Errorf("a refused call: %q", got)
	}
	if len(gw.calls) != 2 {
		t.Errorf("calls that reached the gateway: %v, want 2", gw.calls)
	}
	// Without a gateway, or a bot, nothing is offered.
	if got := (&openAIBackend{}).offer(context.Background(), Request{Bot: "b1"}, &p); got != nil {
		t.Errorf("no gateway: %v", got)
	}
}
