package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The kinds are listed once (sections); what names them to users reads
// that list, word for word as before.
func TestAIKindsNamedFromOneList(t *testing.T) {
	if got, want := AIKinds(), []string{"demo", "exec", "openai", "dify", "http"}; !slices.Equal(got, want) {
		t.Errorf("AIKinds() = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		kind, want string
	}{
		{"", `config key ai.kind: required (one of "demo", "exec", "openai", "dify", "http")`},
		{"gpt", `config key ai.kind: "gpt" is not a backend (want "demo", "exec", "openai", "dify" or "http")`},
	} {
		if err := (AIBackend{Kind: tc.kind}).validate(); err == nil || err.Error() != tc.want {
			t.Errorf("kind %q: %v, want %s", tc.kind, err, tc.want)
		}
	}
	for _, k := range Keys {
		if k.Name == "ai.kind" && k.Usage != "AI backend: demo, exec, openai, dify or http" {
			t.Errorf("--ai's usage %q does not name the kinds", k.Usage)
		}
	}
}

// Every kind has its section under its own name, in AIBackend and AI,
// validated when (and only when) ai.kind names it, and carried by Primary
// and With.
func TestAIKindsHaveTheirSections(t *testing.T) {
	for _, kind := range AIKinds() {
		for _, typ := range []reflect.Type{reflect.TypeFor[AIBackend](), reflect.TypeFor[AI]()} {
			if !slices.ContainsFunc(reflect.VisibleFields(typ), func(f reflect.StructField) bool { return f.Tag.Get("yaml") == kind }) {
				t.Errorf("%s has no section %q", typ.Name(), kind)
			}
		}
	}
	// A section of every kind, each invalid in a way its validate names.
	bad := AIBackend{Demo: AIDemo{Paragraphs: -1}, Exec: AIExec{}, OpenAI: AIOpenAI{}, Dify: AIDify{}, HTTP: AIHTTP{}}
	for _, kind := range AIKinds() {
		b := bad
		b.Kind = kind
		err := b.validate()
		if err == nil || !strings.Contains(err.Error(), "config key ai."+kind+".") {
			t.Errorf("kind %s with a bad section: %v, want an error naming ai.%s.…", kind, err, kind)
		}
		if got := (AI{}).With(b).Primary(); !reflect.DeepEqual(got, b) {
			t.Errorf("kind %s: With then Primary gives %+v, want %+v", kind, got, b)
		}
	}
}
