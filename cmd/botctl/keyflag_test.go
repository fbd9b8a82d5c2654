package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/spf13/pflag"
)

// Every flag of serve that sets a config key names the key's type in
// --help, and its default when the key has one (config.Defaults, or the
// value a backend fills a zero with).
func TestServeFlagsShowTypeAndDefault(t *testing.T) {
	root := newRootCmd()
	var help strings.Builder
	root.SetOut(&help)
	root.SetArgs([]string{"serve", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	serve, _, err := root.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	flags := serve.Flags() // with the root's persistent flags, merged by --help's parse
	defaults := config.Defaults()
	wantType := map[reflect.Kind]string{reflect.Int: "int", reflect.Int64: "int", reflect.Float64: "float", reflect.Bool: "true|false", reflect.Slice: "list", reflect.String: "string"}
	for _, k := range config.Keys {
		f := flags.Lookup(k.Flag)
		if f == nil {
			t.Errorf("config key %s: serve has no flag --%s", k.Name, k.Flag)
			continue
		}
		v, ok := fieldAt(defaults, k.Name)
		if !ok {
			t.Errorf("config key %s: no field at that path", k.Name)
			continue
		}
		want := wantType[v.Kind()]
		switch {
		case v.Type() == reflect.TypeFor[time.Duration]():
			want = "duration"
		case k.Name == "ai.exec.command":
			want = "command"
		}
		if got := f.Value.Type(); got != want {
			t.Errorf("--%s (config key %s): type %q, want %q", k.Flag, k.Name, got, want)
		}
		if v.IsZero() && appliedDefaults[k.Name] == "" || k.Name == "node_id" {
			continue // no default, or this machine's name
		}
		def, _ := defaultValue(defaults, k.Name)
		if d, ok := appliedDefaults[k.Name]; ok {
			def = d
		}
		def = strings.Trim(strings.Trim(def, "[]"), `"`)
		if f.DefValue != strings.ReplaceAll(def, ", ", ",") {
			t.Errorf("--%s (config key %s): default %q, want %q", k.Flag, k.Name, f.DefValue, def)
		}
		line := helpLine(help.String(), f)
		if !strings.Contains(line, "(default ") {
			t.Errorf("--%s: help line shows no default: %q", k.Flag, line)
		}
	}
	for _, want := range []string{"--etcd-dial-timeout duration ", "(default 5s)", `--data-dir string `, `(default "data")`, "--log-level string", `(default "info")`} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("serve --help has no %q", want)
		}
	}
}

func helpLine(help string, f *pflag.Flag) string {
	for _, l := range strings.Split(help, "\n") {
		if strings.Contains(l, "--"+f.Name+" ") {
			return l
		}
	}
	return ""
}
