package config

import (
	"strings"
	"testing"
	"time"
)

// ai.fallback, ai.first_token_timeout and ai.breaker at the top level and
// in a bot's entry: read from the file, the defaults where unset, every
// bad value named by its key.
func TestFallbackChainKeys(t *testing.T) {
	p := writeFile(t, `
ai:
  kind: openai
  openai: {model: gpt-4o}
  first_token_timeout: 20s
  fallback:
    - kind: openai
      openai: {base_url: https://backup.example.com/v1, model: qwen, api_key_env: BACKUP_KEY}
    - kind: demo
bots:
  - id: b1
    secret: s1
    ai:
      breaker: {failures: 3, cooldown: 1m}
      fallback:
        - kind: http
          http: {url: https://n8n.example.com/webhook/x}
`)
	cfg, err := Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	top := cfg.TopSettings().AI
	if top.FirstTokenTimeout != 20*time.Second || top.Breaker != (AIBreaker{DefaultBreakerFailures, DefaultBreakerCooldown}) {
		t.Errorf("top ai = %+v", top)
	}
	bs := top.Backends()
	if len(bs) != 3 || bs[0].OpenAI.Model != "gpt-4o" || bs[1].OpenAI.Model != "qwen" || bs[1].OpenAI.APIKeyEnv != "BACKUP_KEY" || bs[2].Kind != "demo" {
		t.Errorf("top backends = %+v", bs)
	}
	b1, err := cfg.BotSettings("b1")
	if err != nil {
		t.Fatal(err)
	}
	if len(b1.AI.Fallback) != 1 || b1.AI.Fallback[0].Kind != "http" || b1.AI.Breaker.Failures != 3 || b1.AI.FirstTokenTimeout != 20*time.Second {
		t.Errorf("b1's ai = %+v: want its own list (replacing the top's), its breaker, the top's first-token timeout", b1.AI)
	}
	// The document renders back (bots show) and reads again to the same.
	doc := b1.Doc()
	again, err := cfg.TopSettings().Override(doc, false)
	if err != nil || len(again.AI.Fallback) != 1 || again.AI.Fallback[0].HTTP.URL != "https://n8n.example.com/webhook/x" {
		t.Errorf("doc %v read back: %+v, %v", doc["ai"], again.AI.Fallback, err)
	}

	bad := writeFile(t, `
ai:
  kind: demo
  first_token_timeout: -1s
  breaker: {failures: -2}
bots:
  - id: b1
    secret: s1
    ai:
      fallback:
        - kind: openai
        - kind: smoke
        - {kind: exec, exec: {input: yaml}}
`)
	cfg, err = Load(bad, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.Validate()
	for _, want := range []string{"config key ai.first_token_timeout:", "config key ai.breaker.failures:",
		"config key bots[0].ai.fallback[0].openai.model: required", `config key bots[0].ai.fallback[1].kind: "smoke"`,
		"config key bots[0].ai.fallback[2].exec.command: required"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("errors %v: want %q", err, want)
		}
	}
}

// At run time (botctl bots set) a fallback entry may not name a program,
// a file, a variable or an endpoint, as the ai section's own keys may not.
func TestFallbackRuntimeRefusals(t *testing.T) {
	doc := map[string]any{"ai": map[string]any{"fallback": []any{
		map[string]any{"kind": "openai", "openai": map[string]any{"model": "m", "base_url": "https://evil.example.com/v1", "api_key_env": "HOME"}},
		map[string]any{"kind": "exec", "exec": map[string]any{"command": []any{"sh"}}},
		map[string]any{"kind": "demo", "demo": map[string]any{"paragraphs": 2}},
	}}}
	_, err := Defaults().TopSettings().Override(doc, true)
	for _, want := range []string{"ai.fallback[0].openai.base_url: not settable at run time", "ai.fallback[0].openai.api_key_env: not settable at run time",
		"ai.fallback[1].exec.command: not settable at run time"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("errors %v: want %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "fallback[2]") {
		t.Errorf("the demo entry is settable: %v", err)
	}
	ok := map[string]any{"ai": map[string]any{"first_token_timeout": "5s", "fallback": []any{map[string]any{"kind": "demo"}}}}
	s, err := Defaults().TopSettings().Override(ok, true)
	if err != nil || s.AI.FirstTokenTimeout != 5*time.Second || len(s.AI.Fallback) != 1 {
		t.Fatalf("settable keys: %+v, %v", s.AI, err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}
