package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/spf13/pflag"
)

// keyFlag is the flag of a configuration key: it holds the text given,
// parsed by the key (config.Key.Set) when serve applies it, and tells
// --help the key's type and its default, as pflag's own flags do.
type keyFlag struct {
	value string
	typ   string
}

func (f *keyFlag) String() string     { return f.value }
func (f *keyFlag) Set(s string) error { f.value = s; return nil }
func (f *keyFlag) Type() string       { return f.typ }

// addKeyFlag defines k's flag on fs with the key's type and its value in
// defaults as the flag's default.
func addKeyFlag(fs *pflag.FlagSet, k config.Key, defaults config.Config) {
	typ, def := keyTypeDefault(k, defaults)
	v := &keyFlag{value: def, typ: typ}
	fs.Var(v, k.Flag, fmt.Sprintf("%s (config key %s, env %s)", k.Usage, k.Name, k.Env()))
}

// appliedDefaults are the defaults of keys left zero in config.Defaults
// and filled in by their AI backend when it is built (pkg/ai): zero there
// means this value.
var appliedDefaults = map[string]string{
	"ai.openai.base_url":    config.OpenAIDefaultBaseURL,
	"ai.openai.api_key_env": config.OpenAIDefaultAPIKeyEnv,
	"ai.openai.timeout":     shortDuration(config.OpenAIDefaultTimeout),
	"ai.dify.base_url":      config.DifyDefaultBaseURL,
	"ai.dify.timeout":       shortDuration(config.DifyDefaultTimeout),
	"ai.http.timeout":       shortDuration(config.HTTPDefaultTimeout),
	"ai.demo.answer_time":   shortDuration(config.DemoDefaultAnswerTime),
}

// keyTypeDefault is the type --help names for k (what its value is
// written as) and k's default rendered as the flag takes it ("" for
// none; a zero number "0", which --help does not show).
func keyTypeDefault(k config.Key, defaults config.Config) (typ, def string) {
	typ, def = keyTypeValue(k, defaults)
	if d, ok := appliedDefaults[k.Name]; ok && (def == "" || def == "0") {
		def = d
	}
	return typ, def
}

func keyTypeValue(k config.Key, defaults config.Config) (typ, def string) {
	v, ok := fieldAt(defaults, k.Name)
	if !ok {
		return "string", ""
	}
	switch x := v.Interface().(type) {
	case time.Duration:
		if x == 0 {
			return "duration", "0"
		}
		return "duration", shortDuration(x)
	case int, int64:
		return "int", fmt.Sprint(x)
	case float64:
		return "float", fmt.Sprint(x)
	case bool:
		return "true|false", fmt.Sprint(x)
	case []string:
		if k.Name == "ai.exec.command" { // argv, split at spaces
			return "command", strings.Join(x, " ")
		}
		return "list", strings.Join(x, ",")
	case string:
		return "string", x
	}
	return "string", ""
}
