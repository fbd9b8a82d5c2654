package config

import (
	"os"
	"strings"
	"testing"
)

// ai.tools takes business types and business types' tools; anything else
// is refused at start, naming the key and the entry.
func TestAIToolsValidated(t *testing.T) {
	for _, ok := range [][]string{nil, {"msg/get_message", "todo"}, {"smartsheet/smartsheet_get_records"}} {
		if err := ValidateTools(ok); err != nil {
			t.Errorf("%v refused: %v", ok, err)
		}
	}
	for _, bad := range [][]string{{"msg/"}, {"/get_message"}, {"Msg"}, {"msg/get message"}, {"msg/a/b"}, {"todo", "todo"}, {""}} {
		err := ValidateTools(bad)
		if err == nil || !strings.Contains(err.Error(), "config key ai.tools") {
			t.Errorf("%q: %v, want a refusal naming ai.tools", bad, err)
		}
	}
	cfg := Defaults()
	cfg.AI.Kind, cfg.AI.Tools = AIKindDemo, []string{"msg/GET"}
	if err := cfg.AI.Validate(); err == nil || !strings.Contains(err.Error(), "ai.tools") {
		t.Errorf("the ai section with a bad tool: %v", err)
	}
	p := secretFile(t, "botctl.yaml", "ai:\n  kind: demo\n  tools: [msg/get_message, todo]\nbots:\n  - id: b1\n    secret: s1\n    ai: {tools: [msg]}\n")
	c, err := Load(p, nil)
	if err != nil || strings.Join(c.AI.Tools, " ") != "msg/get_message todo" {
		t.Fatalf("ai.tools from the file: %v, %v", c.AI.Tools, err)
	}
	if b1, err := c.BotSettings("b1"); err != nil || strings.Join(b1.AI.Tools, " ") != "msg" {
		t.Fatalf("b1's ai.tools: %v, %v", b1.AI.Tools, err)
	}
	if c, err = Load(p, []string{"BOTCTL_AI_TOOLS=todo/create_todo,msg"}); err != nil || strings.Join(c.AI.Tools, " ") != "todo/create_todo msg" {
		t.Fatalf("ai.tools from the environment: %v, %v", c.AI.Tools, err)
	}
}

// api.agent_tokens_file: one agent and token a line; a short token, a
// name or token twice, a malformed line and a file every user reads are
// refused with the key and the line.
func TestAgentTokensFile(t *testing.T) {
	tok1, tok2 := strings.Repeat("a", MinTokenBytes), strings.Repeat("b", 32)
	a := API{AgentTokensFile: secretFile(t, "agents", "# agents\nn8n "+tok1+"\n\ndify-app   "+tok2+"\n")}
	got, err := a.AgentTokens()
	if err != nil || len(got) != 2 || got[tok1] != "n8n" || got[tok2] != "dify-app" {
		t.Fatalf("tokens %v, %v", got, err)
	}
	if got, err := (API{}).AgentTokens(); got != nil || err != nil {
		t.Fatalf("unset: %v %v", got, err)
	}
	for name, body := range map[string]string{
		"short":      "n8n short",
		"name twice": "n8n " + tok1 + "\nn8n " + tok2,
		"shared":     "n8n " + tok1 + "\ndify " + tok1,
		"malformed":  "n8n " + tok1 + " extra",
		"bad name":   "n8n/x " + tok1,
	} {
		_, err := API{AgentTokensFile: secretFile(t, "agents", body)}.AgentTokens()
		if err == nil || !strings.Contains(err.Error(), "config key api.agent_tokens_file") {
			t.Errorf("%s: %v, want a refusal naming api.agent_tokens_file", name, err)
		}
	}
	p := secretFile(t, "agents", "n8n "+tok1)
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (API{AgentTokensFile: p}).AgentTokens(); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a file every user reads: %v", err)
	}
}

// An agent may not have the node API's token: the audit would not know
// which it is.
func TestAgentTokenIsNotTheNodeToken(t *testing.T) {
	tok := strings.Repeat("c", MinTokenBytes)
	cfg := Defaults()
	cfg.Bots = []Bot{{ID: "b1", Secret: "s1"}}
	cfg.API.TokenFile = secretFile(t, "token", tok)
	cfg.API.AgentTokensFile = secretFile(t, "agents", "n8n "+tok)
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "api.agent_tokens_file") || !strings.Contains(err.Error(), "n8n") {
		t.Fatalf("an agent with the node's token: %v", err)
	}
	cfg.API.AgentTokensFile = secretFile(t, "agents", "n8n "+strings.Repeat("d", MinTokenBytes))
	if err := cfg.Validate(); err != nil && strings.Contains(err.Error(), "agent_tokens_file") {
		t.Fatalf("an agent with a token of its own: %v", err)
	}
}
