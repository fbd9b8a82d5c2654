package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/node"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// registerNode puts node id, serving bots, in the node registry of the
// etcd at endpoints, as a running node's record (pkg/node's
// <prefix>nodes/<id>, under a lease), until the test ends.
func registerNode(t *testing.T, endpoints []string, id string, bots ...string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	info := node.Info{ID: id, Started: time.Now(), Bots: map[string]node.BotStatus{}}
	for _, b := range bots {
		info.Bots[b] = node.BotStatus{State: node.StateStandby, Since: time.Now()}
	}
	raw, _ := json.Marshal(info)
	if _, err := cli.Put(ctx, prefix+"nodes/"+id, string(raw), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
}

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
	registerNode(t, e.Endpoints(), "n1", "b1")
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

// bots set builds the bot's backend here before it stores anything (a dry
// run) and refuses a bot no node serves; --force stores either. A node
// serving the bot refuses an override it cannot build, and botctl status
// shows that refusal (the table and --json).
func TestBotsSetChecksBeforeItStoresAndStatusShowsARefusal(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	os.Unsetenv("OPENAI_API_KEY")
	dir := t.TempDir()
	serveUntilReady(t, "serve", "--demo", "--demo-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--data-dir", dir)
	ep, err := os.ReadFile(filepath.Join(dir, endpointFile))
	if err != nil {
		t.Fatal(err)
	}
	etcd := strings.TrimSpace(string(ep))
	stored := func(bot string) int64 {
		t.Helper()
		out, stderr, code := runBotctl(t, "bots", "show", "--etcd", etcd, "--bot", bot, "--json")
		if code != 0 {
			t.Fatalf("bots show: exit %d\n%s", code, stderr)
		}
		var v botSettingsView
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("bots show --json: %v\n%s", err, out)
		}
		return v.Revision
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	testwait.Eventually(t, 30*time.Second, "the node registered", func() bool {
		nodes, _ := node.Nodes(context.Background(), cli, prefix)
		return len(nodes) == 1
	})
	openai := []string{"--set", "ai.kind=openai", "--set", "ai.openai.model=gpt-4o-mini"}

	// The dry run: the key variable is not set here.
	_, stderr, code := runBotctl(t, append([]string{"bots", "set", "--etcd", etcd, "--bot", "demo"}, openai...)...)
	if code != 2 || !strings.Contains(stderr, "cannot be built on this machine") || !strings.Contains(stderr, "OPENAI_API_KEY") ||
		!strings.Contains(stderr, "nothing stored") || !strings.Contains(stderr, "--force") {
		t.Errorf("bots set of an unbuildable backend: exit %d, %q; want exit 2 naming OPENAI_API_KEY, nothing stored and --force", code, stderr)
	}
	if rev := stored("demo"); rev != 0 {
		t.Fatalf("a refused override was stored at revision %d", rev)
	}
	// A bot no node serves.
	_, stderr, code = runBotctl(t, "bots", "set", "--etcd", etcd, "--bot", "dmeo", "--set", "access.busy_text=wait")
	if code != 2 || !strings.Contains(stderr, "no registered node serves it") || !strings.Contains(stderr, "serves demo") ||
		!strings.Contains(stderr, "nothing stored") || !strings.Contains(stderr, "--force") {
		t.Errorf("bots set of a bot no node serves: exit %d, %q; want exit 2 naming the bots served, nothing stored and --force", code, stderr)
	}
	if rev := stored("dmeo"); rev != 0 {
		t.Fatalf("an override of a bot no node serves was stored at revision %d", rev)
	}
	if _, stderr, code := runBotctl(t, "bots", "set", "--etcd", etcd, "--bot", "dmeo", "--set", "access.busy_text=wait", "--force"); code != 0 || stored("dmeo") == 0 {
		t.Fatalf("bots set --force of a bot no node serves: exit %d, %s", code, stderr)
	}

	// --force stores the unbuildable one; the node refuses it and serves
	// the demo as before, and status says so.
	if _, stderr, code := runBotctl(t, append([]string{"bots", "set", "--etcd", etcd, "--bot", "demo", "--force"}, openai...)...); code != 0 {
		t.Fatalf("bots set --force: exit %d, %s", code, stderr)
	}
	rev := stored("demo")
	var st Status
	testwait.Eventually(t, 30*time.Second, "status shows the refusal", func() bool {
		out, err := run(t, "status", "--etcd", etcd, "--data-dir", dir, "--json")
		if err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		st = Status{}
		if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		for _, b := range st.Bots {
			if b.ID == "demo" && len(b.SettingsRefused) > 0 {
				return true
			}
		}
		return false
	})
	for _, b := range st.Bots {
		if b.ID != "demo" {
			continue
		}
		if r := b.SettingsRefused; len(r) != 1 || r[0].Node == "" || r[0].Revision != rev || r[0].Serving != 0 || !strings.Contains(r[0].Reason, "OPENAI_API_KEY") {
			t.Errorf("status --json: demo's settings_refused %+v, want one node refusing revision %d for OPENAI_API_KEY, serving the file's", r, rev)
		}
	}
	out, err := run(t, "status", "--etcd", etcd, "--data-dir", dir)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	if !strings.Contains(out, "demo, settings override in etcd refused") || !strings.Contains(out, fmt.Sprintf("revision %d refused: ", rev)) ||
		!strings.Contains(out, "OPENAI_API_KEY") || !strings.Contains(out, "serves the bot with the config file's settings") {
		t.Errorf("status does not show the refusal:\n%s", out)
	}

	// An override that leaves the file's ai section as it is builds no
	// backend here: the nodes built the file's already. (This file's
	// openai backend could not be built here.)
	cfg := write(t, "ai: {kind: openai, openai: {model: m}}\nbots: [{id: demo, secret: s}]\n")
	doc := write(t, "access: {busy_text: wait}\n")
	if _, stderr, code := runBotctl(t, "bots", "set", "--etcd", etcd, "--config", cfg, "--bot", "demo", "--file", doc); code != 0 || stored("demo") == rev {
		t.Errorf("bots set of texts only over a file whose backend this machine cannot build: exit %d, %s; want it stored", code, stderr)
	}
}
