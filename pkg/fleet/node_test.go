package fleet

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/clusterkey"
	"github.com/botctl/botctl/pkg/config"
)

// A node serves a registered bot beside the file's when its secret opens
// under the node's key; the file's entry wins for a bot in both; a bot of
// another env is that env's; no key, another key or bad settings refuse
// the bot, naming why, and the others are still served.
func TestForNode(t *testing.T) {
	k, other := key(t, 1), key(t, 2)
	top := config.Defaults().TopSettings()
	rec := func(k *clusterkey.Key, id, env string, settings string) Bot {
		t.Helper()
		var doc map[string]any
		if settings != "" {
			var err error
			if doc, err = config.ParseSettings([]byte(settings)); err != nil {
				t.Fatal(err)
			}
		}
		b, err := New(k, id, env, "owner-"+id, doc, top, []byte("secret-"+id), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	badSettings := rec(k, "bad", "", "")
	badSettings.Settings = map[string]any{"memory": map[string]any{"bytes": 12}}
	program := rec(k, "prog", "", "")
	program.Settings = map[string]any{"ai": map[string]any{"kind": "exec", "exec": map[string]any{"command": []any{"/bin/sh"}}}}
	records := []Bot{
		rec(k, "reg", "", "access: {busy_text: wait}"),
		rec(k, "prodbot", "prod", ""),
		rec(k, "stagebot", "staging", ""),
		rec(k, "filebot", "", ""),
		rec(other, "otherkey", "", ""),
		badSettings,
		program,
	}
	file := []config.Bot{{ID: "filebot", Secret: "file-secret"}}

	got, refused := ForNode(records, file, "prod", k, top)
	ids := map[string]config.Bot{}
	for _, b := range got {
		ids[b.ID] = b
	}
	if len(got) != 2 || ids["reg"].Secret != "secret-reg" || ids["reg"].Owner != "owner-reg" || ids["reg"].Settings["access"] == nil || ids["prodbot"].Secret != "secret-prodbot" {
		t.Errorf("served: %+v, want reg and prodbot with their secrets", got)
	}
	says := map[string]string{
		"otherkey": "encrypted under key " + other.ID() + ", this node has key " + k.ID(),
		"bad":      "memory.bytes",
		"prog":     "ai.exec.command",
	}
	if len(refused) != len(says) {
		t.Errorf("refused %v, want %d", refused, len(says))
	}
	for bot, want := range says {
		found := false
		for _, err := range refused {
			found = found || strings.Contains(err.Error(), "bot "+bot) && strings.Contains(err.Error(), want)
		}
		if !found {
			t.Errorf("%s not refused saying %q: %v", bot, want, refused)
		}
	}
	for _, err := range refused {
		if strings.Contains(err.Error(), "secret-") {
			t.Errorf("a refusal shows a secret: %v", err)
		}
	}

	// A node without the key refuses every registered bot, naming
	// secrets.key_file, and still serves nothing wrongly.
	got, refused = ForNode(records[:2], nil, "prod", nil, top)
	if len(got) != 0 || len(refused) != 2 || !errors.Is(refused[0], clusterkey.ErrNoKey) || !strings.Contains(refused[0].Error(), "secrets.key_file") {
		t.Errorf("no key: served %v, refused %v", got, refused)
	}
}
