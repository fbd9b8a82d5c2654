package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/config"
)

// runBotctl runs botctl with args, as main does, and returns stdout, stderr and
// the exit code main would give.
func runBotctl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := newRootCmd()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	// Bounded: a serve that should have refused its config and did not
	// fails the test instead of running until the test binary's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	code := 0
	if err != nil {
		code = 1
		var ue usageError
		if errors.As(err, &ue) {
			code = 2
		}
		errb.WriteString("botctl: " + err.Error() + "\n")
	}
	return out.String(), errb.String(), code
}

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "botctl.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The example names every key of config.Keys (so keys others add appear
// by themselves) and passes config check as it is.
func TestConfigExamplePassesCheck(t *testing.T) {
	out, stderr, code := runBotctl(t, "config", "example")
	if code != 0 {
		t.Fatalf("config example: exit %d: %s", code, stderr)
	}
	for _, k := range config.Keys {
		leaf := k.Name[strings.LastIndex(k.Name, ".")+1:]
		if !strings.Contains(out, leaf+":") || !strings.Contains(out, k.Env()) {
			t.Errorf("example lacks key %s (%s)", k.Name, k.Env())
		}
	}
	p := write(t, out)
	sout, serr, code := runBotctl(t, "config", "check", p)
	if code != 0 {
		t.Fatalf("config check of the example: exit %d\n%s", code, serr)
	}
	if lines := strings.Count(strings.TrimSpace(sout), "\n"); lines != 0 || !strings.Contains(sout, " ok: ") {
		t.Fatalf("want a one-line summary, got %q", sout)
	}
}

// A file with several bad values: every error on its own line naming its
// key, exit 1.
func TestConfigCheckBadFile(t *testing.T) {
	p := write(t, `
listen: nowhere
nats:
  replicas: 2
push:
  budget: 99
election:
  ttl: 1s
bots:
  - id: b1
    secret_file: /nonexistent/b1.secret
`)
	_, stderr, code := runBotctl(t, "config", "check", p)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, stderr)
	}
	for _, key := range []string{"config key listen:", "config key nats.replicas:", "config key push.budget:", "bots[0].secret_file", "election.ttl"} {
		if !strings.Contains(stderr, key) {
			t.Errorf("stderr lacks %q:\n%s", key, stderr)
		}
	}
	if !strings.Contains(stderr, "error(s)") {
		t.Errorf("no count of errors:\n%s", stderr)
	}
}

func TestConfigCheckUnknownKey(t *testing.T) {
	p := write(t, "push:\n  budgett: 10\n")
	_, stderr, code := runBotctl(t, "config", "check", p)
	if code != 1 || !strings.Contains(stderr, "unknown key push.budgett") {
		t.Fatalf("exit %d, stderr %s; want 1 and the unknown key named", code, stderr)
	}
}

func TestConfigCheckMissingFile(t *testing.T) {
	_, stderr, code := runBotctl(t, "config", "check", filepath.Join(t.TempDir(), "none.yaml"))
	if code != 1 || !strings.Contains(stderr, "none.yaml") {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
}

func TestConfigCheckNeedsFile(t *testing.T) {
	if _, _, code := runBotctl(t, "config", "check"); code != 2 {
		t.Fatalf("exit %d without FILE, want 2 (usage)", code)
	}
}

// What the AI section needs from the machine (the exec command in PATH,
// the API key's variable) is checked by config check and at serve's
// start, not only when the backend is first built: pkg/config checks the
// values, pkg/ai the machine.
func TestConfigCheckNamesWhatTheAIBackendLacks(t *testing.T) {
	for _, tc := range []struct{ yaml, key string }{
		{"ai:\n  kind: exec\n  exec:\n    command: [/no/such/program]\n", "ai.exec.command"},
		{"ai:\n  kind: openai\n  openai:\n    model: m\n    api_key_env: BOTCTL_TEST_NO_SUCH_KEY\n", "ai.openai.api_key_env"},
	} {
		_, stderr, code := runBotctl(t, "config", "check", write(t, tc.yaml))
		if code == 0 || !strings.Contains(stderr, tc.key) {
			t.Errorf("config check of %q: exit %d, stderr %q; want a failure naming %s", tc.yaml, code, stderr, tc.key)
		}
		_, stderr, code = runBotctl(t, "serve", "--config", write(t, tc.yaml), "--data-dir", t.TempDir())
		if code != 2 || !strings.Contains(stderr, tc.key) {
			t.Errorf("serve with %q: exit %d, stderr %q; want exit 2 naming %s", tc.yaml, code, stderr, tc.key)
		}
	}
}

// Credentials that would cross the network in clear text are refused by
// config check and by serve's start, naming the key and the fix: a NATS
// password to a remote nats:// server, the API token to a remote http://
// fixed worker, the OpenAI key over http:// to another machine.
func TestConfigCheckRefusesClearTextCredentials(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-test") // the key is there: only its way is wrong
	dir := t.TempDir()
	pw, tok := filepath.Join(dir, "nats.pw"), filepath.Join(dir, "api.token")
	os.WriteFile(pw, []byte("nats-password-0123\n"), 0o600)
	os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	for _, tc := range []struct{ yaml, key, fix string }{
		{fmt.Sprintf("nats:\n  url: nats://10.0.0.2:4222\n  user: botctl\n  password_file: %s\n", pw), "config key nats.url", "tls://"},
		{fmt.Sprintf("api:\n  token_file: %s\ndispatch:\n  fixed_worker: http://10.0.0.7:8391\n", tok), "config key dispatch.fixed_worker", "https://"},
		{"ai:\n  kind: openai\n  openai:\n    model: m\n    base_url: http://llm.internal:8000/v1\n", "config key ai.openai.base_url", "https://"},
	} {
		_, stderr, code := runBotctl(t, "config", "check", write(t, tc.yaml))
		if code == 0 || !strings.Contains(stderr, tc.key) || !strings.Contains(stderr, tc.fix) {
			t.Errorf("config check of %q: exit %d, stderr %q; want a failure naming %s and %s", tc.yaml, code, stderr, tc.key, tc.fix)
		}
		_, stderr, code = runBotctl(t, "serve", "--config", write(t, tc.yaml), "--data-dir", t.TempDir())
		if code != 2 || !strings.Contains(stderr, tc.key) {
			t.Errorf("serve with %q: exit %d, stderr %q; want exit 2 naming %s", tc.yaml, code, stderr, tc.key)
		}
		if strings.Contains(stderr, "nats-password-0123") || strings.Contains(stderr, "0123456789abcdef0123456789abcdef") {
			t.Errorf("a secret in the error: %s", stderr)
		}
	}
}

// config check warns about a BOTCTL_* variable botctl does not read,
// naming the nearest, and still passes a good file.
func TestConfigCheckWarnsAboutUnknownVariable(t *testing.T) {
	t.Setenv(misspeltVar, "20s")
	_, stderr, code := runBotctl(t, "config", "check", write(t, "node_id: n1\n"))
	if code != 0 || !strings.Contains(stderr, "warning: $"+misspeltVar+" is set but botctl reads no such variable: it is ignored; did you mean $BOTCTL_ELECTION_TTL?") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
}
