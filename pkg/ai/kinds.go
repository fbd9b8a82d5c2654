package ai

import (
	"fmt"
	"os"

	"github.com/botctl/botctl/pkg/config"
)

// kinds are the backends New builds, one line each: ai.kind's value (as
// pkg/config spells it and validates its section; TestKindsAreConfigKinds
// holds this table to config.AIKinds), how the backend is built from its
// validated section, and what its protocol can carry, which the contract
// every backend keeps (contract_test.go) checks. A new backend is a file
// of its own and a line here (and its section in pkg/config).
var kinds = []kind{
	{name: KindDemo, build: buildFunc(func(c Config, o options) (Backend, error) { d := newDemo(c.Demo); d.clock = o.clock; return d, nil }), reply: true, thinking: true, tools: true},
	{name: KindExec, build: buildFunc(func(c Config, _ options) (Backend, error) { return newExec(c.Exec) }), upstream: true},
	{name: KindOpenAI, build: buildFunc(buildOpenAI), upstream: true, usage: true, thinking: true},
	{name: KindDify, build: buildFunc(func(c Config, o options) (Backend, error) { return newDify(c.Dify, o.sessions) }), upstream: true, usage: true, thinking: true, tools: true},
	{name: KindHTTP, build: buildFunc(func(c Config, _ options) (Backend, error) { return newHTTP(c.HTTP) }), upstream: true, usage: true, reply: true, thinking: true, tools: true},
}

// kind is one kind of backend.
type kind struct {
	name  string  // ai.kind's value
	build builder // the backend of a validated configuration of this kind
	// upstream: it asks a server or a process, which can fail before or
	// after its first token, stall and time out (the demo has none).
	upstream bool
	usage    bool // it reports what an answer cost (ReportUsage)
	reply    bool // it can send a rich reply (SendReply)
	thinking bool // it hands on the model's reasoning (Think)
	tools    bool // it hands on an agent's tool steps (ThinkTool) of its protocol (openai's own, of WeCom's tools through WithTools, are not the contract's)
}

// builder builds one backend from a configuration validated by
// config.AI.Validate whose Kind is the builder's.
type builder interface {
	build(cfg Config, o options) (Backend, error)
}

// buildFunc is a func as a builder.
type buildFunc func(cfg Config, o options) (Backend, error)

func (f buildFunc) build(cfg Config, o options) (Backend, error) { return f(cfg, o) }

// kindNamed is the kind of that name.
func kindNamed(name string) (kind, bool) {
	for _, k := range kinds {
		if k.name == name {
			return k, true
		}
	}
	return kind{}, false
}

// newOne builds the one backend cfg's kind names.
func newOne(cfg Config, o options) (Backend, error) {
	k, ok := kindNamed(cfg.Kind)
	if !ok { // config validated the kind: its list and kinds disagree
		return nil, fmt.Errorf("config key ai.kind: %q is a backend this build cannot make (kinds: %v)", cfg.Kind, config.AIKinds())
	}
	return k.build.build(cfg, o)
}

// buildOpenAI is the openai backend, offering the bot's ai.tools through
// o's gateway when both are there.
func buildOpenAI(c Config, o options) (Backend, error) {
	b, err := newOpenAI(c.OpenAI, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	if len(c.Tools) > 0 {
		b.tools = o.tools
	}
	return b, nil
}
