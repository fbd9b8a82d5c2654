package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/botctl/botctl/internal/testenv"
)

// bots set stores a bot's override in etcd, checked over --config's
// settings of the bot; bots show --json reads it back with what the bot
// runs with. A bad key is refused with the key named (exit 2) and nothing
// changes; a key naming a program is refused at run time.
func TestBotsSetAndShow(t *testing.T) {
	e := testenv.StartEtcd(t)
	etcd := strings.Join(e.Endpoints(), ",")
	cfg := write(t, `
ai:
  kind: demo
  demo: {paragraphs: 2}
bots:
  - id: b1
    secret: s
    access: {busy_text: file busy}
`)
	out, stderr, code := runBotctl(t, "bots", "set", "--etcd", etcd, "--config", cfg, "--bot", "b1",
		"--set", "ai.demo.paragraphs=4", "--set", "access.allow_users=[ann, bob]")
	if code != 0 || !strings.Contains(out, "override stored at revision") {
		t.Fatalf("bots set: exit %d\n%s%s", code, out, stderr)
	}
	show := func() botSettingsView {
		t.Helper()
		out, stderr, code := runBotctl(t, "bots", "show", "--etcd", etcd, "--config", cfg, "--bot", "b1", "--json")
		if code != 0 {
			t.Fatalf("bots show: exit %d\n%s", code, stderr)
		}
		var v botSettingsView
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("bots show --json: %v\n%s", err, out)
		}
		return v
	}
	v := show()
	eff, _ := json.Marshal(v.Effective)
	if v.Key != "/botctl/settings/b1" || v.Revision == 0 || v.Error != "" ||
		!strings.Contains(string(eff), `"paragraphs":4`) || !strings.Contains(string(eff), `"busy_text":"file busy"`) || !strings.Contains(string(eff), `"allow_users":["ann","bob"]`) {
		t.Fatalf("bots show: %+v\neffective %s", v, eff)
	}

	for _, tc := range []struct{ set, want string }{
		{"ai.demo.paragrafs=3", "config key ai.demo.paragrafs: unknown"},
		{"ai.demo.paragraphs=5000", "config key ai.demo.paragraphs: 5000 is out of range"},
		{"ai.exec.command=[/bin/sh, -c, id]", "config key ai.exec.command: not settable at run time"},
		{"memory.idle_expiry=soon", "config key memory.idle_expiry: soon is not a duration"},
		{"ai.fallback=[{kind: smoke}]", `config key ai.fallback[0].kind: "smoke" is not a backend`},
		{"ai.fallback=[{kind: http, http: {url: https://evil.example.com/x}}]", "config key ai.fallback[0].http.url: not settable at run time"},
		{"ai.first_token_timeout=-1s", "config key ai.first_token_timeout: -1s"},
	} {
		_, stderr, code := runBotctl(t, "bots", "set", "--etcd", etcd, "--config", cfg, "--bot", "b1", "--set", tc.set)
		if code != 2 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "nothing stored") {
			t.Errorf("bots set --set %s: exit %d, %q; want exit 2 naming %q", tc.set, code, stderr, tc.want)
		}
	}
	if after := show(); after.Revision != v.Revision {
		t.Fatalf("a refused change was stored: revision %d → %d", v.Revision, after.Revision)
	}

	// A fallback list and the breaker, at run time, shown back.
	if _, stderr, code := runBotctl(t, "bots", "set", "--etcd", etcd, "--config", cfg, "--bot", "b1",
		"--set", "ai.fallback=[{kind: demo, demo: {paragraphs: 1}}]", "--set", "ai.breaker.failures=2"); code != 0 {
		t.Fatalf("bots set ai.fallback: exit %d: %s", code, stderr)
	}
	eff, _ = json.Marshal(show().Effective)
	if !strings.Contains(string(eff), `"fallback":[{"demo":{"paragraphs":1},"kind":"demo"}]`) || !strings.Contains(string(eff), `"breaker":{"cooldown":"30s","failures":2}`) {
		t.Fatalf("effective after setting a fallback: %s", eff)
	}

	// --file replaces the document; --clear removes it.
	doc := write(t, `{"memory": {"turns": 4}}`)
	if _, stderr, code := runBotctl(t, "bots", "set", "--etcd", etcd, "--config", cfg, "--bot", "b1", "--file", doc); code != 0 {
		t.Fatalf("bots set --file: exit %d: %s", code, stderr)
	}
	if v := show(); len(v.Override) != 1 || v.Override["memory"] == nil {
		t.Fatalf("--file did not replace the override: %+v", v.Override)
	}
	if _, stderr, code := runBotctl(t, "bots", "set", "--etcd", etcd, "--bot", "b1", "--clear"); code != 0 {
		t.Fatalf("bots set --clear: exit %d: %s", code, stderr)
	}
	out, _, _ = runBotctl(t, "bots", "show", "--etcd", etcd, "--config", cfg)
	if !strings.Contains(out, "bot b1: no override in etcd") || !strings.Contains(out, "busy_text: file busy") {
		t.Fatalf("bots show after --clear:\n%s", out)
	}
}

// config check validates every bot's entry, naming the bad key by its
// place in the file.
func TestConfigCheckNamesABadBotKey(t *testing.T) {
	p := write(t, `
bots:
  - id: b1
    secret: s
    ai: {openai: {system_prompt: fine}}
  - id: b2
    secret: s
    ai: {kind: openai}
    memory: {turnz: 3}
`)
	_, stderr, code := runBotctl(t, "config", "check", p)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, stderr)
	}
	for _, want := range []string{"config key bots[1].ai.openai.model: required", "config key bots[1].memory.turnz: unknown"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "bots[0]") {
		t.Errorf("a good bot named:\n%s", stderr)
	}
}
