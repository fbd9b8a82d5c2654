package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/clusterkey"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/fleet"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// secretFile writes a file holding content, mode 600, and returns its path.
func secretFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// bots add registers a bot in etcd with its secret sealed under
// --config's cluster key (never on stdout, stderr or in etcd in plain
// text), list shows it, rotate-secret replaces the secret, remove takes it
// out; each refusal exits 2 naming what to fix.
func TestBotsRegistry(t *testing.T) {
	noKeyEnv := func() {
		t.Setenv("BOTCTL_SECRETS_KEY_FILE", "") // restored when the test ends
		os.Unsetenv("BOTCTL_SECRETS_KEY_FILE")
	}
	noKeyEnv()
	e := testenv.StartEtcd(t)
	etcd := strings.Join(e.Endpoints(), ",")
	keyFile := secretFile(t, "cluster.key", strings.Repeat("5a", 32)+"\n")
	k, err := clusterkey.Load(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := write(t, `
secrets: {key_file: `+keyFile+`}
bots:
  - id: filebot
    secret: s
`)
	const secret, rotated = "first-wecom-secret-42", "second-wecom-secret-77"
	var shown []string
	run := func(wantCode int, args ...string) string {
		t.Helper()
		out, stderr, code := runBotctl(t, append(args, "--etcd", etcd)...)
		shown = append(shown, out, stderr)
		if code != wantCode {
			t.Fatalf("botctl %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, wantCode, out, stderr)
		}
		return out + stderr
	}
	settings := secretFile(t, "settings.yaml", "access: {busy_text: 请稍候}\n")
	out := run(0, "bots", "add", "--config", cfg, "--bot", "b1", "--secret-file", secretFile(t, "b1.secret", secret+"\n"),
		"--env", "prod", "--owner", "ops", "--settings", settings)
	if !strings.Contains(out, "bot b1: registered") || !strings.Contains(out, k.ID()) {
		t.Errorf("add: %s", out)
	}
	if out := run(2, "bots", "add", "--config", cfg, "--bot", "b1", "--secret-file", secretFile(t, "x", "other")); !strings.Contains(out, "registered already") {
		t.Errorf("second add: %s", out)
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opened := func(bot string) string {
		t.Helper()
		b, err := fleet.Get(ctx, cli, prefix, bot)
		if err != nil {
			t.Fatal(err)
		}
		s, err := b.OpenSecret(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := opened("b1"); s != secret {
		t.Errorf("stored secret opens to %q", s)
	}

	// The key from BOTCTL_SECRETS_KEY_FILE, no --config; the file's bot
	// added too is noted as the file's.
	t.Setenv("BOTCTL_SECRETS_KEY_FILE", keyFile)
	run(0, "bots", "add", "--bot", "b2", "--secret-file", secretFile(t, "b2.secret", secret))
	if out := run(0, "bots", "add", "--config", cfg, "--bot", "filebot", "--secret-file", secretFile(t, "f.secret", secret)); !strings.Contains(out, "the file's entry wins") {
		t.Errorf("a bot of --config added: %s", out)
	}
	noKeyEnv()

	var views []registryView
	if err := json.Unmarshal([]byte(run(0, "bots", "list", "--config", cfg, "--json")), &views); err != nil {
		t.Fatal(err)
	}
	if len(views) != 3 || views[0].Bot != "b1" || views[0].Env != "prod" || views[0].Owner != "ops" || views[0].SealedUnder != k.ID() ||
		views[0].Settings["access"] == nil || views[0].InConfig || !views[2].InConfig || views[0].Revision == 0 {
		t.Errorf("list --json: %+v", views)
	}
	if out := run(0, "bots", "list", "--config", cfg); !strings.Contains(out, "b1") || !strings.Contains(out, k.ID()) || !strings.Contains(out, "also in --config") {
		t.Errorf("list: %s", out)
	}

	// No node leads b1: nobody proves the new secret, which stays pending.
	if out := run(0, "bots", "rotate-secret", "--config", cfg, "--bot", "b1", "--secret-file", secretFile(t, "b1.new", rotated), "--wait", "1s"); !strings.Contains(out, "no node proved the new secret within 1s") {
		t.Errorf("rotate-secret with no leader: %s", out)
	}
	if s := opened("b1"); s != rotated {
		t.Errorf("after rotate-secret the secret opens to %q", s)
	}
	if out := run(0, "bots", "list", "--config", cfg); !strings.Contains(out, "new secret not proved yet") {
		t.Errorf("list after rotate-secret: %s", out)
	}

	// Refusals: each exits 2 and says what to fix; nothing is stored.
	noKey := write(t, "bots: []\n")
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"bots", "add", "--config", noKey, "--bot", "b3", "--secret-file", secretFile(t, "b3", secret)}, "secrets.key_file is not set"},
		{[]string{"bots", "add", "--config", cfg, "--bot", "b3"}, "--secret-file is required"},
		{[]string{"bots", "add", "--config", cfg, "--bot", "b3", "--secret-file", secretFile(t, "empty", "\n")}, "is empty"},
		{[]string{"bots", "add", "--config", cfg, "--bot", "b3", "--secret-file", secretFile(t, "b3", secret), "--settings", secretFile(t, "bad.yaml", "memory: {bytes: 12}")}, "memory.bytes"},
		{[]string{"bots", "add", "--config", cfg, "--bot", "a/b", "--secret-file", secretFile(t, "b3", secret)}, "bot id"},
		{[]string{"bots", "rotate-secret", "--config", cfg, "--bot", "nope", "--secret-file", secretFile(t, "b3", secret)}, "not registered"},
		{[]string{"bots", "rotate-secret", "--config", noKey, "--bot", "b1", "--secret-file", secretFile(t, "b3", secret)}, "secrets.key_file"},
		{[]string{"bots", "remove", "--bot", "nope"}, "not registered"},
	} {
		if out := run(2, tc.args...); !strings.Contains(out, tc.says) {
			t.Errorf("botctl %s: %s, want it to say %q", strings.Join(tc.args, " "), out, tc.says)
		}
	}
	if _, err := fleet.Get(ctx, cli, prefix, "b3"); err == nil {
		t.Errorf("a refused add stored b3")
	}

	run(0, "bots", "remove", "--bot", "b1")
	if err := json.Unmarshal([]byte(run(0, "bots", "list", "--json")), &views); err != nil {
		t.Fatal(err)
	}
	if len(views) != 2 || views[0].Bot != "b2" {
		t.Errorf("list after remove: %+v", views)
	}

	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		shown = append(shown, string(kv.Value))
	}
	for _, text := range shown {
		if strings.Contains(text, secret) || strings.Contains(text, rotated) {
			t.Errorf("a secret shows: %s", text)
		}
	}
}

// bots show says where each bot is defined: the file, the registry, or
// both (the file's entry wins); a registered bot's effective settings are
// its record's over --config's top level.
func TestBotsShowSource(t *testing.T) {
	t.Setenv("BOTCTL_SECRETS_KEY_FILE", secretFile(t, "cluster.key", strings.Repeat("3c", 32)))
	e := testenv.StartEtcd(t)
	etcd := strings.Join(e.Endpoints(), ",")
	cfg := write(t, `
access: {busy_text: top busy}
bots:
  - id: filebot
    secret: s
`)
	for _, bot := range []string{"regbot", "filebot"} {
		_, stderr, code := runBotctl(t, "bots", "add", "--etcd", etcd, "--config", cfg, "--bot", bot, "--secret-file", secretFile(t, bot, "secret-"+bot),
			"--settings", secretFile(t, bot+".yaml", "access: {busy_text: "+bot+" busy}"))
		if code != 0 {
			t.Fatalf("bots add %s: exit %d\n%s", bot, code, stderr)
		}
	}
	out, stderr, code := runBotctl(t, "bots", "show", "--etcd", etcd, "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("bots show: exit %d\n%s", code, stderr)
	}
	var views []botSettingsView
	if err := json.Unmarshal([]byte(out), &views); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := map[string]botSettingsView{}
	for _, v := range views {
		got[v.Bot] = v
	}
	busy := func(v botSettingsView) any { a, _ := v.Effective["access"].(map[string]any); return a["busy_text"] }
	if len(views) != 2 || got["filebot"].Source != "config+registry" || got["regbot"].Source != "registry" ||
		busy(got["regbot"]) != "regbot busy" || busy(got["filebot"]) != "top busy" {
		t.Errorf("bots show --json:\n%s", out)
	}
	out, _, _ = runBotctl(t, "bots", "show", "--etcd", etcd, "--config", cfg)
	if !strings.Contains(out, "bot filebot: defined in --config and in the bot registry") || !strings.Contains(out, "the file's entry wins") ||
		!strings.Contains(out, "bot regbot: defined in the bot registry") {
		t.Errorf("bots show:\n%s", out)
	}
	out, _, _ = runBotctl(t, "bots", "show", "--etcd", etcd, "--config", cfg, "--bot", "regbot", "--json")
	var one botSettingsView
	if err := json.Unmarshal([]byte(out), &one); err != nil || one.Source != "registry" || busy(one) != "regbot busy" {
		t.Errorf("bots show --bot regbot --json: %v\n%s", err, out)
	}
}

// rotate-secret waits for the outcome the leader records (here written as
// a node does, fleet.SettleRotation): proved, it says so; refused, it
// fails with WeCom's error and says the old secret is kept.
func TestRotateSecretReportsTheLeadersOutcome(t *testing.T) {
	t.Setenv("BOTCTL_SECRETS_KEY_FILE", "") // restored when the test ends
	os.Unsetenv("BOTCTL_SECRETS_KEY_FILE")
	e := testenv.StartEtcd(t)
	keyFile := secretFile(t, "cluster.key", strings.Repeat("6b", 32)+"\n")
	k, err := clusterkey.Load(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := write(t, "secrets: {key_file: "+keyFile+"}\n")
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	b, err := fleet.New(k, "b1", "", "", nil, config.Defaults().TopSettings(), []byte("old-secret"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Add(ctx, cli, "/botctl/", b); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		secret  string
		refusal error
		code    int
		says    string
	}{
		{"new-secret", nil, 0, "the new secret is proved by node n1"},
		{"wrong-secret", errors.New("wecom: bot b1: authentication failed: errcode 40001: invalid credential"), 1,
			"WeCom refused the new secret (node n1): wecom: bot b1: authentication failed: errcode 40001"},
	} {
		before, err := fleet.Get(ctx, cli, "/botctl/", "b1")
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			out  string
			code int
		}
		done := make(chan result, 1)
		go func() {
			out, stderr, code := runBotctl(t, "bots", "rotate-secret", "--config", cfg, "--etcd", strings.Join(e.Endpoints(), ","),
				"--bot", "b1", "--secret-file", secretFile(t, "new", tc.secret), "--wait", "30s")
			done <- result{out + stderr, code}
		}()
		var pending fleet.Bot
		testwait.Eventually(t, 30*time.Second, "the rotation stored", func() bool {
			select {
			case r := <-done:
				t.Fatalf("rotate-secret ended before the outcome: exit %d\n%s", r.code, r.out)
			default:
			}
			pending, err = fleet.Get(ctx, cli, "/botctl/", "b1")
			return err == nil && pending.Rev != before.Rev
		})
		if err := fleet.SettleRotation(ctx, cli, "/botctl/", pending, "n1", tc.refusal, time.Now()); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.code != tc.code || !strings.Contains(r.out, tc.says) {
			t.Errorf("refusal %v: exit %d, want %d, saying %q:\n%s", tc.refusal, r.code, tc.code, tc.says, r.out)
		}
		after, err := fleet.Get(ctx, cli, "/botctl/", "b1")
		if err != nil {
			t.Fatal(err)
		}
		if s, err := after.OpenSecret(k); err != nil || s != "new-secret" {
			t.Errorf("refusal %v: the secret after it opens to %q, %v; want the one proved", tc.refusal, s, err)
		}
	}
}
