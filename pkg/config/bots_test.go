package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// A bot's entry overrides the top level key by key: a bot that sets only
// its system prompt keeps the top level's kind, model and key variable;
// another sets its own texts, allowlist and memory; a bot the file does
// not list has the top level's.
func TestBotEntryInheritsTheTopLevelFieldByField(t *testing.T) {
	p := writeFile(t, `
ai:
  kind: openai
  openai:
    model: gpt-4o-mini
    api_key_env: MY_KEY
    system_prompt: top prompt
access:
  receipt_text: top receipt
  allow_users: [ann]
bots:
  - id: b1
    secret: s1
    ai:
      openai:
        system_prompt: b1 prompt
  - id: b2
    secret: s2
    ai:
      kind: demo
      demo: {paragraphs: 5, answer_time: 2s}
    access:
      busy_text: b2 busy
      allow_users: [bob, cy]
    memory:
      turns: 0
      idle_expiry: 1h
`)
	cfg, err := Load(p, []string{"BOTCTL_AI_OPENAI_MODEL=gpt-4o"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b1, err := cfg.BotSettings("b1")
	if err != nil {
		t.Fatal(err)
	}
	if o := b1.AI.OpenAI; b1.AI.Kind != "openai" || o.Model != "gpt-4o" || o.APIKeyEnv != "MY_KEY" || o.SystemPrompt != "b1 prompt" {
		t.Errorf("b1's ai = %+v, want the top level's kind, model (from the environment) and key with its own prompt", b1.AI)
	}
	if b1.Access.ReceiptText != "top receipt" || b1.Memory.Turns != 20 {
		t.Errorf("b1 = %+v, want the top level's access and memory", b1)
	}
	b2, err := cfg.BotSettings("b2")
	if err != nil {
		t.Fatal(err)
	}
	if b2.AI.Kind != "demo" || b2.AI.Demo.Paragraphs != 5 || b2.AI.Demo.AnswerTime != 2*time.Second || b2.AI.OpenAI.Model != "gpt-4o" {
		t.Errorf("b2's ai = %+v", b2.AI)
	}
	if a := b2.Access; a.BusyText != "b2 busy" || a.ReceiptText != "top receipt" || strings.Join(a.AllowUsers, ",") != "bob,cy" {
		t.Errorf("b2's access = %+v, want its busy text and allowlist, the top level's receipt", a)
	}
	if m := b2.Memory; m.Turns != 0 || m.Bytes != 16<<10 || m.IdleExpiry != time.Hour {
		t.Errorf("b2's memory = %+v", m)
	}
	other, _ := cfg.BotSettings("demo-bot")
	if other.AI.OpenAI.SystemPrompt != "top prompt" {
		t.Errorf("a bot not in the file: %+v, want the top level's", other.AI)
	}
}

// config check names the bad key of a bot's entry, by its place in the
// file: an unknown key, a bad value, a value the top level would take
// but that fails for this bot, a node-wide key.
func TestBotEntryErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ entry, want string }{
		{"ai: {demo: {paragrafs: 3}}", "config key bots[0].ai.demo.paragrafs: unknown"},
		{"ai: {demo: {paragraphs: 5000}}", "config key bots[0].ai.demo.paragraphs: 5000 is out of range"},
		{"ai: {kind: openai}", "config key bots[0].ai.openai.model: required"},
		{"ai: {kind: ollama}", `config key bots[0].ai.kind: "ollama" is not a backend`},
		{"memory: {idle_expiry: 48h}", "config key bots[0].memory.idle_expiry: 48h0m0s: want 1m to 24h0m0s"},
		{"memory: {turns: lots}", `config key bots[0].memory.turns: "lots" is not an integer`},
		{"ai: {max_concurrency: 3}", "config key bots[0].ai.max_concurrency: this node's, not a bot's"},
		{"access: {unsupported_text: '%s and %d'}", "config key bots[0].access.unsupported_text"},
		{"access: {reported_version: 1.0 beta}", "config key bots[0].access.reported_version"},
		{"access: {reported_version: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx}", "config key bots[0].access.reported_version: \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\": want at most 64 bytes"},
		{"access: {welcome_card: 'hello'}", "config key bots[0].access.welcome_card: not a JSON object"},
		{`access: {welcome_card: '{"title": "hi"}'}`, `config key bots[0].access.welcome_card: no "card_type"`},
		{"limits: {per_user: 3}", "config key bots[0].limits.per_user: unknown"},
		{"ai: text", "config key bots[0].ai: want a mapping"},
	} {
		cfg, err := Load(writeFile(t, "bots:\n  - id: b1\n    secret: s\n    "+tc.entry+"\n"), nil)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.entry, err, tc.want)
		}
	}
}

// At run time (a `botctl bots set` document) what names a program, a
// file, a variable or an endpoint is refused, the key named; the rest of
// the same keys is taken.
func TestRuntimeOverrideRefusesMachineKeys(t *testing.T) {
	base := Defaults().TopSettings()
	for _, doc := range []string{
		"ai: {exec: {command: [/bin/sh, -c, id]}}",
		"ai: {openai: {api_key_env: BOTCTL_BOT_B1_SECRET}}",
		"ai: {openai: {base_url: https://elsewhere.example}}",
		"ai: {exec: {env: [HOME]}}",
	} {
		m, err := ParseSettings([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := base.Override(m, false); err != nil {
			t.Errorf("%s in the file: %v", doc, err)
		}
		_, err = base.Override(m, true)
		if err == nil || !strings.Contains(err.Error(), "not settable at run time") {
			t.Errorf("%s at run time: %v, want refused", doc, err)
		}
	}
	m, err := ParseSettings([]byte(`{"ai": {"openai": {"system_prompt": "be brief", "model": "m"}}, "access": {"allow_users": ["a"]}, "memory": {"idle_expiry": "2h"}}`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := base.Override(m, true)
	if err != nil || s.AI.OpenAI.SystemPrompt != "be brief" || s.Memory.IdleExpiry != 2*time.Hour || s.Access.AllowUsers[0] != "a" {
		t.Fatalf("JSON document: %+v, %v", s, err)
	}
	// What Doc renders reads back the same.
	again, err := base.Override(s.Doc(), true)
	if err != nil || again.AI.OpenAI.SystemPrompt != "be brief" || again.Memory.IdleExpiry != 2*time.Hour {
		t.Fatalf("Doc read back: %+v, %v", again, err)
	}
}

func TestSetKey(t *testing.T) {
	doc := map[string]any{}
	for _, kv := range [][2]string{{"ai.demo.paragraphs", "4"}, {"access.allow_users", "[a, b]"}, {"access.receipt_text", "稍等: 马上"}, {"ai.openai.system_prompt", ""}} {
		if err := SetKey(doc, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Defaults().TopSettings().Override(doc, true)
	if err != nil || s.AI.Demo.Paragraphs != 4 || len(s.Access.AllowUsers) != 2 || s.Access.ReceiptText != "稍等: 马上" {
		t.Fatalf("%+v, %v", s, err)
	}
	if err := SetKey(doc, "push.budget", "3"); err == nil || !strings.Contains(err.Error(), "SECTION one of ai, access, memory, limits") {
		t.Fatalf("a key outside the bot's sections: %v", err)
	}
}

// The top level takes every key a bot's entry takes, flag or not
// (ai.demo.paragraphs, ai.exec.input and ai.openai.timeout have none).
func TestTopLevelTakesTheBotSectionsKeys(t *testing.T) {
	cfg, err := Load(writeFile(t, "ai:\n  demo: {paragraphs: 7}\n  exec: {input: json, timeout: 2m}\n  openai: {timeout: 3m}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AI.Demo.Paragraphs != 7 || cfg.AI.Exec.Input != "json" || cfg.AI.Exec.Timeout != 2*time.Minute || cfg.AI.OpenAI.Timeout != 3*time.Minute {
		t.Fatalf("ai = %+v", cfg.AI)
	}
	if _, err := Load(writeFile(t, "ai:\n  demo: {paragrafs: 7}\n"), nil); err == nil || !strings.Contains(err.Error(), "config key ai.demo.paragrafs: unknown") {
		t.Fatalf("a typo: %v", err)
	}
}

// Field types a backend's block may use besides text, numbers, durations
// and lists: an optional number (a pointer: nil is not set) and a
// mapping of text (headers).
func TestSettingsFieldTypes(t *testing.T) {
	var v struct {
		Temperature *float64          `yaml:"temperature"`
		MaxTokens   uint32            `yaml:"max_tokens"`
		Headers     map[string]string `yaml:"headers"`
	}
	doc, err := ParseSettings([]byte(`{"ai": {"temperature": 0, "max_tokens": 512, "headers": {"X-A": "1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := setFields("ai.", doc["ai"].(map[string]any), reflect.ValueOf(&v).Elem(), func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if v.Temperature == nil || *v.Temperature != 0 || v.MaxTokens != 512 || v.Headers["X-A"] != "1" {
		t.Fatalf("%+v", v)
	}
	if d := docOf(reflect.ValueOf(v)).(map[string]any); d["temperature"] != 0.0 || d["max_tokens"] != uint32(512) {
		t.Fatalf("doc %+v", d)
	}
	if err := setFields("ai.", map[string]any{"max_tokens": -1}, reflect.ValueOf(&v).Elem(), func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "config key ai.max_tokens") {
		t.Fatalf("negative max_tokens: %v", err)
	}
}

// Limits: top level, per bot, from the environment, validated by key.
func TestLimitsKeys(t *testing.T) {
	p := writeFile(t, `
ai: {kind: demo}
limits:
  user: {messages_per_minute: 5}
access:
  limit_text: slow down
bots:
  - id: b1
    secret: s1
    limits:
      bot: {messages_per_day: 1000, tokens_per_day: 200000}
  - id: b2
    secret: s2
    limits:
      user: {messages_per_day: -1}
`)
	cfg, err := Load(p, []string{"BOTCTL_LIMITS_USER_TOKENS_PER_DAY=5000"})
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "config key bots[1].limits.user.messages_per_day: -1: want 0 (no limit, the default)") {
		t.Fatalf("Validate() = %v, want bots[1].limits.user.messages_per_day named", err)
	}
	b1, err := cfg.BotSettings("b1")
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{User: LimitSet{MessagesPerMinute: 5, TokensPerDay: 5000}, Bot: LimitSet{MessagesPerDay: 1000, TokensPerDay: 200000}}
	if b1.Limits != want || b1.Access.LimitText != "slow down" {
		t.Fatalf("b1's limits %+v, text %q: want %+v and the top level's text", b1.Limits, b1.Access.LimitText, want)
	}
	// At run time, by key.
	doc := map[string]any{}
	if err := SetKey(doc, "limits.user.messages_per_day", "20"); err != nil {
		t.Fatal(err)
	}
	s, err := b1.Override(doc, true)
	if err != nil {
		t.Fatal(err)
	}
	if s.Limits.User.MessagesPerDay != 20 || s.Limits.User.MessagesPerMinute != 5 {
		t.Fatalf("override: %+v", s.Limits)
	}
}
