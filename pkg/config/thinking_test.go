package config

import (
	"strings"
	"testing"
)

// ai.show_thinking takes YAML's true and false and the word tools, at the
// top level and per bot (a bot's own wins), from the file and the
// environment; any other value is refused naming the key and the values.
func TestShowThinking(t *testing.T) {
	p := writeFile(t, `
ai:
  kind: demo
  show_thinking: true
bots:
  - id: b1
    secret: s
    ai:
      show_thinking: tools
  - id: b2
    secret: s
    ai:
      show_thinking: false
  - id: b3
    secret: s
`)
	cfg, err := Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	for bot, want := range map[string]string{"b1": ShowThinkingTools, "b2": ShowThinkingOff, "b3": ShowThinkingOn} {
		s, err := cfg.BotSettings(bot)
		if err != nil || s.AI.ShowThinking != want {
			t.Errorf("bot %s: show_thinking %q (%v), want %q", bot, s.AI.ShowThinking, err, want)
		}
	}
	if cfg, err := Load(p, []string{"BOTCTL_AI_SHOW_THINKING=false"}); err != nil || cfg.AI.ShowThinking != ShowThinkingOff {
		t.Errorf("from the environment: %q, %v", cfg.AI.ShowThinking, err)
	}
	if d := Defaults(); d.AI.ShowThinking != "" {
		t.Errorf("default %q, want off", d.AI.ShowThinking)
	}
	for _, bad := range []string{"yes", "True", "reasoning"} {
		cfg := Defaults()
		cfg.Bots = []Bot{{ID: "b1", Secret: "s"}}
		cfg.AI.ShowThinking = bad
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "config key ai.show_thinking") || !strings.Contains(err.Error(), "tools") {
			t.Errorf("show_thinking %q: %v, want an error naming the key and the values", bad, err)
		}
	}
	bad := writeFile(t, `
ai:
  kind: demo
bots:
  - id: b1
    secret: s
    ai:
      show_thinking: sometimes
`)
	cfg, err = Load(bad, nil)
	if err == nil {
		err = cfg.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "config key bots[0].ai.show_thinking") {
		t.Errorf("a bot's bad show_thinking: %v, want an error naming the key", err)
	}
}
