package config

import (
	"os"
	"path/filepath"
	"testing"
)

// A config file of any bytes is taken or refused with an error, never a
// panic, and so is what it leaves for Validate: an operator's typo stops
// the node with a message, not a stack trace.
func FuzzLoadFile(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("..", "..", "deploy", "botctl.example.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	for _, s := range []string{
		"",
		"election:\n  ttl: 0s\n",
		"bots:\n  - id: b1\n    secret: s\n    ai:\n      backend: http\n",
		"bots: [1, {id: 2}]\n",
		"worker:\n  slots: -1\n",
		"push:\n  stream_window: 1ns\n",
		"ai: {fallback: [{backend: openai}, 3]}\n",
		"a: &a [*a, *a]\n",
		"1: {2: 3}\n",
		"access: {allowed_users: x}\n",
		"limits:\n  per_user: {rate: -5}\n",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, raw []byte) {
		p := filepath.Join(dir, "botctl.yaml")
		if err := os.WriteFile(p, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(p, nil)
		if err != nil {
			return
		}
		_ = cfg.Validate()
	})
}
