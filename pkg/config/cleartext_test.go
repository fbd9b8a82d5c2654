package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/botctl/botctl/internal/testenv"
)

// Credentials that would cross the network in clear text are refused, each
// error naming the key and the fix, as etcd's password over http:// is:
// NATS user/password to a remote server without TLS, the API token to a
// remote http:// fixed worker, the OpenAI key over http:// to another
// machine. Loopback and TLS are fine.
func TestClearTextCredentialsRefused(t *testing.T) {
	pw := secretFile(t, "pw", "password-0123456789")
	tok := secretFile(t, "tok", "0123456789abcdef0123")
	ca := testenv.NewCA(t).CAFile
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"nats password to a remote nats://", func(c *Config) {
			c.NATS.URL, c.NATS.User, c.NATS.PasswordFile = "nats://10.0.0.2:4222", "botctl", pw
		}, []string{"config key nats.url", "clear text", "tls://"}},
		{"nats password to one remote nats:// server of a cluster", func(c *Config) {
			c.NATS.URL, c.NATS.User, c.NATS.PasswordFile = "tls://10.0.0.2:4222, nats://10.0.0.3:4222", "botctl", pw
		}, []string{"config key nats.url", "server 2", "tls://"}},
		{"token to a remote http fixed worker", func(c *Config) {
			c.API.TokenFile, c.Dispatch.FixedWorker = tok, "http://10.0.0.7:8391"
		}, []string{"config key dispatch.fixed_worker", "clear text", "https://"}},
		{"fixed worker without the cluster's token", func(c *Config) {
			c.Dispatch.FixedWorker = "http://127.0.0.1:8392"
		}, []string{"config key api.token_file", "generated one is its own"}},
		{"openai key over http to another machine", func(c *Config) {
			c.AI.Kind, c.AI.OpenAI.Model, c.AI.OpenAI.BaseURL = AIKindOpenAI, "m", "http://llm.internal:8000/v1"
		}, []string{"config key ai.openai.base_url", "clear text", "https://"}},
		{"dify key over http to another machine", func(c *Config) {
			c.AI.Kind, c.AI.Dify.APIKeyFile, c.AI.Dify.BaseURL = AIKindDify, tok, "http://dify.internal/v1"
		}, []string{"config key ai.dify.base_url", "clear text", "https://"}},
		{"http token over http to another machine", func(c *Config) {
			c.AI.Kind, c.AI.HTTP.TokenFile, c.AI.HTTP.URL = AIKindHTTP, tok, "http://10.0.0.9:5678/webhook/6f1c2a9e"
		}, []string{"config key ai.http.url", "clear text", "https://"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.edit(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate() = nil, want a refusal")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %v, want it to say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "password-0123456789") || strings.Contains(err.Error(), "0123456789abcdef0123") {
				t.Errorf("a secret in the error: %v", err)
			}
		})
	}
	for name, edit := range map[string]func(*Config){
		"nats password over tls://": func(c *Config) { c.NATS.URL, c.NATS.User, c.NATS.PasswordFile = "tls://10.0.0.2:4222", "botctl", pw },
		"nats password to loopback": func(c *Config) { c.NATS.URL, c.NATS.User, c.NATS.PasswordFile = "nats://127.0.0.1:4222", "botctl", pw },
		"nats password with a CA": func(c *Config) {
			c.NATS.URL, c.NATS.User, c.NATS.PasswordFile, c.NATS.CAFile = "nats://10.0.0.2:4222", "botctl", pw, ca
		},
		"nats without a password":  func(c *Config) { c.NATS.URL = "nats://10.0.0.2:4222" },
		"token to an https worker": func(c *Config) { c.API.TokenFile, c.Dispatch.FixedWorker = tok, "https://10.0.0.7:8391" },
		"token to a loopback worker": func(c *Config) {
			c.API.TokenFile, c.Dispatch.FixedWorker = tok, "http://127.0.0.1:8392"
		},
		"openai over https": func(c *Config) {
			c.AI.Kind, c.AI.OpenAI.Model, c.AI.OpenAI.BaseURL = AIKindOpenAI, "m", "https://llm.internal/v1"
		},
		"openai to a local server": func(c *Config) {
			c.AI.Kind, c.AI.OpenAI.Model, c.AI.OpenAI.BaseURL = AIKindOpenAI, "m", "http://127.0.0.1:11434/v1"
		},
		"dify to a local server": func(c *Config) {
			c.AI.Kind, c.AI.Dify.APIKeyFile, c.AI.Dify.BaseURL = AIKindDify, tok, "http://localhost/v1"
		},
		"http to a local agent": func(c *Config) {
			c.AI.Kind, c.AI.HTTP.TokenFile, c.AI.HTTP.URL = AIKindHTTP, tok, "http://127.0.0.1:5678/webhook/6f1c2a9e"
		},
	} {
		c := Defaults()
		edit(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Without api.token_file, a node's token is generated in its data dir at
// the first call (mode 0600, at least MinTokenBytes) and the same token is
// read on every later one; a caller reads it, and without one is told
// where it would be. A generated file every user may read is refused.
func TestNodeTokenGeneratedOnceInTheDataDir(t *testing.T) {
	dir := t.TempDir()
	var a API
	if _, err := a.CallerToken(dir); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "config key api.token_file") {
		t.Fatalf("caller before any node started: %v, want a not-exist error naming api.token_file", err)
	}
	tok, path, err := a.NodeToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, GeneratedTokenFile) || len(tok) < MinTokenBytes {
		t.Fatalf("token %q in %s, want one of at least %d bytes in %s", tok, path, MinTokenBytes, GeneratedTokenFile)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v, want mode 0600", path, fi, err)
	}
	again, _, err := a.NodeToken(dir)
	if err != nil || again != tok {
		t.Fatalf("second start: %q %v, want the first token", again, err)
	}
	if got, err := a.CallerToken(dir); err != nil || got != tok {
		t.Fatalf("caller: %q %v, want the node's token", got, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("data dir holds %d files, want the token alone (no temporary left)", len(entries))
	}
	os.Chmod(path, 0o644)
	if _, _, err := a.NodeToken(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable generated token: %v, want a refusal saying chmod 600", err)
	}
	// api.token_file, when set, is the token; nothing is generated.
	other := t.TempDir()
	b := API{TokenFile: secretFile(t, "tok", "fedcba9876543210fedcba")}
	if got, p, err := b.NodeToken(other); err != nil || got != "fedcba9876543210fedcba" || p != b.TokenFile {
		t.Fatalf("with api.token_file: %q %s %v", got, p, err)
	}
	if _, err := os.Stat(filepath.Join(other, GeneratedTokenFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a token generated although api.token_file is set: %v", err)
	}
}

// ai.exec.env cannot pass the node's own BOTCTL_* variables (bot secrets,
// *_FILE keys) to the exec backend; it may set a variable of that name.
func TestExecEnvWithholdsTheNodesVariables(t *testing.T) {
	for _, name := range []string{"BOTCTL_BOT_B1_SECRET", "BOTCTL_API_TOKEN_FILE", "botctl_nats_password_file"} {
		e := AIExec{Command: []string{"answer"}, Env: []string{"MODEL=small", name}}
		if err := e.validate(); err == nil || !strings.Contains(err.Error(), "config key ai.exec.env[1]") {
			t.Errorf("ai.exec.env passing %s: %v, want a refusal naming ai.exec.env[1]", name, err)
		}
	}
	if err := (AIExec{Command: []string{"answer"}, Env: []string{"BOTCTL_MODE=test", "OPENAI_API_KEY"}}).validate(); err != nil {
		t.Errorf("a value set, and another name passed: %v", err)
	}
}
