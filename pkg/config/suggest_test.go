package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"abc", "", 3},
		{"", "abc", 3},
		{"base_url", "base_url", 0},
		{"baseurl", "base_url", 1},
		{"kitten", "sitting", 3},
		{"ai.dify.base_ulr", "ai.dify.base_url", 2},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// An unknown key in the file is answered with the nearest known key, not
// a list of every key; with none near, with where the keys are listed.
func TestUnknownKeySuggestsNearest(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"ai:\n  dify:\n    baseurl: http://dify\n", "unknown: did you mean ai.dify.base_url?"},
		{"etcd:\n  endpoint: [http://127.0.0.1:2379]\n", "unknown key etcd.endpoint: did you mean etcd.endpoints?"},
		{"elecion:\n  ttl: 20s\n", "unknown key elecion.ttl: did you mean election.ttl?"},
		{"memory:\n  turn: 3\n", "unknown: did you mean memory.turns?"},
		{"bots:\n  - id: b1\n    secret: s\n    ai:\n      openai:\n        modle: m\n", "config key bots[0].ai.openai.modle: unknown: did you mean bots[0].ai.openai.model?"},
		{"wholly_unrelated_thing: 1\n", "unknown key wholly_unrelated_thing: no key is near it ('botctl config example' prints every key)"},
	} {
		cfg, err := Load(writeFile(t, tc.file), nil)
		if err == nil { // a bot's keys are checked by Validate
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.file, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "node_id") || strings.Contains(err.Error(), "known here") {
			t.Errorf("%q: the error lists keys: %v", tc.file, err)
		}
	}
}

// A misspelt key's variable is warned about, naming the nearest; what
// botctl does read is not.
func TestUnknownEnvWarnsNamingNearest(t *testing.T) {
	cfg := Defaults()
	cfg.AI.OpenAI.APIKeyEnv = "BOTCTL_OPENAI_KEY"
	environ := []string{
		"BOTCTL_AI_DIFY_BASEURL=http://dify",
		"BOTCTL_ELECTION_TLL=20s",
		"BOTCTL_ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ=1",
		"BOTCTL_ETCD_ENDPOINTS=http://127.0.0.1:2379",
		"BOTCTL_LOG_LEVEL=debug",
		"BOTCTL_BOT_MYBOT_SECRET=s",
		"BOTCTL_TASK_ID=t1",
		"BOTCTL_REQUIRE_BROWSER=1",
		"BOTCTL_OPENAI_KEY=sk",
		"PATH=/bin",
		"BOTCTL=bin/botctl",
	}
	got := UnknownEnv(environ, cfg)
	want := []string{
		"$BOTCTL_AI_DIFY_BASEURL is set but botctl reads no such variable: it is ignored; did you mean $BOTCTL_AI_DIFY_BASE_URL?",
		"$BOTCTL_ELECTION_TLL is set but botctl reads no such variable: it is ignored; did you mean $BOTCTL_ELECTION_TTL?",
		"$BOTCTL_ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ is set but botctl reads no such variable: it is ignored",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// envUse finds a BOTCTL_* variable read or set in source, scripts and
// docs: os.Getenv/LookupEnv("…"), a constant …Env = "…", $NAME or
// ${NAME…}, NAME=… in a shell line.
var envUse = regexp.MustCompile(`(?:Getenv|LookupEnv)\("(BOTCTL_[A-Z0-9_]+)"|Env\s*=\s*"(BOTCTL_[A-Z0-9_]+)"|\$\{?(BOTCTL_[A-Z0-9_]+)|(?:^|[\s;(])(BOTCTL_[A-Z0-9_]+)=`)

// Every BOTCTL_* variable the tree reads or tells people to set is one
// botctl knows: a key's, or one of NonKeyEnv, or a bot's secret. A new
// one added without NonKeyEnv fails here, not as a warning to operators.
func TestEveryBotctlVariableInTheTreeIsKnown(t *testing.T) {
	root := filepath.Join("..", "..")
	seen := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == ".git" || n == "node_modules" || n == "testdata" || n == "bench" {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(path)
		if d.Name() == "suggest_test.go" { // this file's misspellings are on purpose
			return nil
		}
		if ext != ".go" && ext != ".sh" && ext != ".md" && ext != ".service" && ext != ".yaml" && ext != ".yml" && d.Name() != "Makefile" {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if !strings.Contains(line, "BOTCTL_") { // the regexp is slow; few lines name one
				continue
			}
			for _, m := range envUse.FindAllStringSubmatch(line, -1) {
				for _, name := range m[1:] {
					if name != "" && !strings.HasSuffix(name, "_") { // BOTCTL_BOT_<ID>_SECRET as a pattern
						seen[name] = path
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 10 {
		t.Fatalf("found only %d BOTCTL_* variables in the tree: the scan is broken", len(seen))
	}
	for _, must := range []string{"BOTCTL_TASK_ID", "BOTCTL_REQUIRE_BROWSER", "BOTCTL_TEST_CLOCK_OFFSET", "BOTCTL_API_TOKEN_FILE"} {
		if seen[must] == "" {
			t.Errorf("the scan did not find %s", must)
		}
	}
	var environ []string
	for name := range seen {
		environ = append(environ, name+"=x")
	}
	for _, w := range UnknownEnv(environ, Defaults()) {
		name := strings.Fields(w)[0][1:]
		t.Errorf("%s (used in %s): add it to NonKeyEnv if botctl or its tests read it", w, seen[name])
	}
}
