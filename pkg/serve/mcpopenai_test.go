package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// toolModel is a local OpenAI-compatible server whose model needs one
// tool: asked first, it calls msg__get_message for the asker's chat;
// given the tool's result, it answers with what the history holds.
type toolModel struct {
	srv      *httptest.Server
	mu       sync.Mutex
	offered  [][]string // each request's function names
	toolText []string   // the tool messages it was given
}

func newToolModel(t *testing.T) *toolModel {
	m := &toolModel{}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var req struct {
			Messages []struct {
				Role    string `json:"role"`
				Content any    `json:"content"`
			} `json:"messages"`
			Tools []struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
		}
		_ = json.Unmarshal(raw, &req)
		var names []string
		for _, tl := range req.Tools {
			names = append(names, tl.Function.Name)
		}
		tool := ""
		for _, msg := range req.Messages {
			if msg.Role == "tool" {
				tool, _ = msg.Content.(string)
			}
		}
		m.mu.Lock()
		m.offered = append(m.offered, names)
		if tool != "" {
			m.toolText = append(m.toolText, tool)
		}
		m.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(delta map[string]any, finish string) {
			choice := map[string]any{"index": 0, "delta": delta, "finish_reason": nil}
			if finish != "" {
				choice["finish_reason"] = finish
			}
			b, _ := json.Marshal(map[string]any{"id": "c1", "object": "chat.completion.chunk", "created": 1700000000, "model": "m", "choices": []any{choice}})
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
		if tool == "" {
			now := time.Now().In(wecomsim.MCPTimeZone)
			args, _ := json.Marshal(map[string]any{"chat_type": 1, "chatid": "alice",
				"begin_time": now.Add(-time.Hour).Format(wecomsim.MCPTimeLayout), "end_time": now.Add(time.Minute).Format(wecomsim.MCPTimeLayout)})
			chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": "call_1", "type": "function",
				"function": map[string]any{"name": "msg__get_message", "arguments": ""}}}}, "")
			chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": string(args)}}}}, "tool_calls")
		} else {
			answer := "the history holds nothing"
			if strings.Contains(tool, "what did I say") {
				answer = "the history holds your question"
			}
			chunk(map[string]any{"content": answer}, "stop")
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(m.srv.Close)
	return m
}

// The openai backend offers the bot's allowed WeCom tools as functions,
// runs the one the model asks for through the node's gateway (audited as
// the backend's), and the model's next turn completes the answer.
func TestOpenAIAnswerWithOneToolCall(t *testing.T) {
	model := newToolModel(t)
	t.Setenv("BOTCTL_TEST_OPENAI_KEY", "sk-test")
	c := startSendCluster(t, wecomsim.Config{}, func(cfg *config.Config) {
		cfg.AI.Kind, cfg.AI.Tools = config.AIKindOpenAI, []string{"msg/get_message"}
		cfg.AI.OpenAI.BaseURL, cfg.AI.OpenAI.Model, cfg.AI.OpenAI.APIKeyEnv = model.srv.URL+"/v1", "m", "BOTCTL_TEST_OPENAI_KEY"
	})
	if err := c.sim.SetMCPAccess(wecomsim.MCPAccess{BotID: "b1", BizType: "msg", Authorized: true}); err != nil {
		t.Fatal(err)
	}
	// The tools are offered once the holder has shared msg's URL.
	testwait.Eventually(t, time.Minute, "msg's URL shared", func() bool {
		return mcpRPC(t, c.n2.API, testToken, "b1", "msg", "tools/list", map[string]any{}).Error == nil
	})
	if _, err := c.sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "alice", Text: "what did I say?"}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "alice answered", func() bool { return answeredWith(c.sim, "alice", "the history holds") })
	if !answeredWith(c.sim, "alice", "the history holds your question") {
		t.Fatalf("the answer did not use the tool's result: %+v", c.sim.Transcript("b1", "alice"))
	}
	model.mu.Lock()
	offered, tools := model.offered, model.toolText
	model.mu.Unlock()
	if len(offered) != 2 || strings.Join(offered[0], ",") != "msg__get_message" {
		t.Fatalf("functions offered per request: %v, want [msg__get_message] then the answer", offered)
	}
	if len(tools) != 1 || !strings.Contains(tools[0], `"errcode":0`) {
		t.Fatalf("the tool's result given to the model: %q", tools)
	}
	audited := false
	for _, n := range []*runningNode{c.n1, c.n2} {
		audited = audited || strings.Contains(n.scrape(t), `botctl_mcp_tool_calls_total{agent="backend",bot="b1",outcome="ok",tool="msg/get_message"} 1`)
	}
	if !audited {
		t.Error("the backend's tool call is not audited on the node that ran it")
	}
}
