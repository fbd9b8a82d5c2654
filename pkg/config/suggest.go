package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// NonKeyEnv are the BOTCTL_* variables that are not configuration keys
// and are read by botctl, its tests or its scripts: none is warned about
// as unknown. Bot secrets (BOTCTL_BOT_<ID>_SECRET) are matched apart.
var NonKeyEnv = []string{
	"BOTCTL_TASK_ID",           // set by the exec AI backend for its command
	"BOTCTL_TEST_CLOCK_OFFSET", // chaos tests: shifts the node's clock probe
	"BOTCTL_TEST_LOG",          // tests: show the nodes' logs
	"BOTCTL_TEST_RUN_MAIN",     // cmd/botctl's tests: run main in a child
	"BOTCTL_REQUIRE_BROWSER",   // make test: the browser test may not skip
	"BOTCTL_CHROMIUM",          // the browser test's Chromium
	"BOTCTL_REQUIRE_SANDBOX",   // test/deploy: the sandbox units' test may not skip
	"BOTCTL_CHAOS",             // make chaos-smoke
	"BOTCTL_CHAOS_OUT",         // the chaos smoke's report file
	"BOTCTL_RELEASE_ALL_ARCH",  // make release-check: test/release builds every architecture
	"BOTCTL_IMAGE",             // deploy/compose: the image its nodes run
	"BOTCTL_DEMO_SECRET",       // deploy/compose: the simulated bot's secret
}

// keyNames is every key the file takes, sorted: the key table's, bots,
// and the keys of the bot sections that the table lacks (set by their
// YAML tags).
var keyNames = sync.OnceValue(func() []string {
	names := []string{"bots"}
	for _, k := range Keys {
		names = append(names, k.Name)
	}
	v := reflect.ValueOf(Config{})
	for _, section := range settingsSections {
		if f, ok := fieldByTag(v, section); ok {
			names = appendLeaves(names, section, f.Type())
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
})

func appendLeaves(names []string, prefix string, t reflect.Type) []string {
	if t.Kind() != reflect.Struct || t == durationType {
		return append(names, prefix)
	}
	for i := 0; i < t.NumField(); i++ {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
			names = appendLeaves(names, prefix+"."+tag, t.Field(i).Type)
		}
	}
	return names
}

// Nearest is the candidate closest to name by edit distance, if one is
// close enough to be what was meant (at most a third of name's length
// off, and at least 2 edits allowed); ties go to the first in order.
func Nearest(name string, candidates []string) (string, bool) {
	best, bestD := "", -1
	for _, c := range candidates {
		if d := editDistance(name, c); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 || bestD > max(2, len(name)/3) {
		return "", false
	}
	return best, true
}

// didYouMean ends an error about the unknown key name: the nearest known
// key, or where every key is listed. (rekey puts a bot's prefix on both
// keys: bots[2].ai.openai.modle, did you mean bots[2].ai.openai.model?)
func didYouMean(name string) string {
	if k, ok := Nearest(name, keyNames()); ok {
		return didYouMeanText + k + "?"
	}
	return "no key is near it ('botctl config example' prints every key)"
}

const didYouMeanText = "did you mean "

// editDistance is the Levenshtein distance of a and b, by byte (keys and
// variable names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// UnknownEnv returns a warning for each BOTCTL_* variable of environ
// that botctl does not read, naming the nearest one it does: a misspelt
// key's variable would otherwise be ignored without a word. Not warned
// about: the keys' variables, NonKeyEnv, bot secrets
// (BOTCTL_BOT_<ID>_SECRET) and a variable that cfg names as an API key's
// (ai.openai.api_key_env, also a bot's).
func UnknownEnv(environ []string, cfg Config) []string {
	known := slices.Clone(NonKeyEnv)
	for _, k := range Keys {
		known = append(known, k.Env())
	}
	named := map[string]bool{cfg.AI.OpenAI.APIKeyEnv: true}
	for _, b := range cfg.Bots {
		if s, err := cfg.BotSettings(b.ID); err == nil {
			named[s.AI.OpenAI.APIKeyEnv] = true
		}
	}
	var warnings []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "BOTCTL_") || slices.Contains(known, name) || named[name] ||
			strings.HasPrefix(name, "BOTCTL_BOT_") && strings.HasSuffix(name, "_SECRET") && len(name) > len("BOTCTL_BOT__SECRET") {
			continue
		}
		w := fmt.Sprintf("$%s is set but botctl reads no such variable: it is ignored", name)
		if near, ok := Nearest(name, known); ok {
			w += fmt.Sprintf("; did you mean $%s?", near)
		}
		warnings = append(warnings, w)
	}
	slices.Sort(warnings)
	return warnings
}
