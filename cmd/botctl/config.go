package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/compaction"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/redact"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check a configuration file, or print a complete commented example (check|example)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErrorf("missing subcommand: check or example (see 'botctl config --help')")
		},
	}
	cmd.AddCommand(newConfigCheckCmd(), newConfigExampleCmd())
	return cmd
}

func newConfigCheckCmd() *cobra.Command {
	var online, deployed bool
	cmd := &cobra.Command{
		Use:   "check FILE",
		Short: "Load and validate FILE as 'botctl serve --config FILE' would (with this environment's BOTCTL_* variables and secret files)",
		Long: `Load FILE over the defaults, then the BOTCTL_* environment, resolve bot
secrets (secret_file, $BOTCTL_BOT_<ID>_SECRET) and validate everything, as
'botctl serve --config FILE' does at start. Every error names its key, one
per line on stderr; the exit status is 1 if there is any, else 0 with a
one-line summary on stdout. Nothing is contacted (etcd, NATS, WeCom),
unless --etcd is given: then the configured etcd cluster is asked how far
its history reaches, and a cluster that does not compact it is a warning
on stderr (botctl writes once a second per led bot; without
auto-compaction etcd fills its space quota and refuses every write).
With --nats, the configured NATS (nats.url) is asked for the deployed
streams, buckets and object store of nats.prefix, and each shared setting
that differs from what FILE asks (nats.replicas, media.ttl) is an error
naming its key: a node started with FILE keeps the deployed value, not
the file's (docs/jetstream.md says how to change a deployed one).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("want one FILE: botctl config check FILE")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			cfg, _ := config.Load(path, os.Environ()) // its errors are checkConfig's
			for _, w := range config.UnknownEnv(os.Environ(), cfg) {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
			}
			errs, summary := checkConfig(path, os.Environ())
			if len(errs) > 0 {
				for _, err := range errs {
					fmt.Fprintln(cmd.ErrOrStderr(), err)
				}
				return fmt.Errorf("config %s: %d error(s)", path, len(errs))
			}
			fmt.Fprintln(cmd.OutOrStdout(), summary)
			if online {
				if err := checkCompaction(cmd, path); err != nil {
					return err
				}
			}
			if deployed {
				return checkDeployed(cmd, path)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&online, "etcd", false, "also ask the configured etcd whether it compacts its history (a warning if not)")
	cmd.Flags().BoolVar(&deployed, "nats", false, "also ask the configured NATS whether its deployed streams and buckets match the file's nats.replicas and media.ttl (an error per difference)")
	return cmd
}

// checkCompaction is config check --etcd: the configured cluster's
// history, and a warning on stderr if it is not compacted.
func checkCompaction(cmd *cobra.Command, path string) error {
	cfg, err := config.Load(path, os.Environ())
	if err != nil {
		return err
	}
	if len(cfg.Etcd.Endpoints) == 0 {
		fmt.Fprintln(cmd.OutOrStdout(), "etcd: embedded (compacts its history every hour)")
		return nil
	}
	cli, err := newEtcdClient(cfg.Etcd)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
	defer cancel()
	h, err := compaction.Read(ctx, cli)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "etcd history: revision %d, compacted at %d\n", h.Revision, h.Compacted)
	if w := h.Warning(); w != "" {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
	}
	return nil
}

// checkDeployed is config check --nats: each shared setting of the
// deployed data plane that differs from the file's is an error naming its
// key (the node would keep the deployed value); one that no key sets
// (changed with the nats CLI, or by another botctl version) is a warning.
func checkDeployed(cmd *cobra.Command, path string) error {
	cfg, err := config.Load(path, os.Environ())
	if err != nil {
		return err
	}
	if cfg.NATS.URL == "" {
		fmt.Fprintln(cmd.OutOrStdout(), "NATS: embedded (a single server this node declares itself: nothing shared to compare)")
		return nil
	}
	f := clusterFlags{config: path, timeout: 10 * time.Second}
	js, _, err := f.jetStream()
	if err != nil {
		return err
	}
	defer js.Conn().Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
	defer cancel()
	found, err := jetstream.Mismatches(ctx, js, cfg.DataPlane())
	if err != nil {
		return fmt.Errorf("read the deployed streams and buckets (prefix %s): %w", cfg.NATS.Prefix, err)
	}
	errs := 0
	for _, m := range found {
		if m.Key == "" {
			fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+m.String())
			continue
		}
		errs++
		fmt.Fprintf(cmd.ErrOrStderr(), "config key %s: %s\n", m.Key, m)
	}
	if errs > 0 {
		return fmt.Errorf("config %s: %d setting(s) differ from the deployed data plane", path, errs)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "NATS %s: the deployed streams and buckets match nats.replicas, media.ttl, media.max_store_bytes and media.reserve_bytes\n", redact.URL(cfg.NATS.URL))
	return nil
}

// checkConfig is what serve checks at start, without starting: every
// error (one per key), or a one-line summary.
func checkConfig(path string, environ []string) ([]error, string) {
	cfg, err := config.Load(path, environ)
	if err != nil {
		return []error{err}, "" // the file does not parse: one error, naming its key
	}
	var errs []error
	if err := cfg.Resolve(environ); err != nil {
		errs = append(errs, err)
	}
	demo := len(cfg.Bots) == 0 && cfg.WeCom.URL == ""
	if err := cfg.Validate(); err != nil {
		errs = append(errs, unjoin(err)...)
	} else if _, err := ai.New(cfg.AI); err != nil {
		errs = append(errs, err) // what depends on the machine: the exec command, its dir, the API key's variable
	} else {
		for i, b := range cfg.Bots { // and each bot's own backend
			if s, _ := cfg.BotSettings(b.ID); b.Settings != nil {
				if _, err := ai.New(s.AI); err != nil {
					errs = append(errs, fmt.Errorf("bots[%d] (%s): %w", i, b.ID, err))
				}
			}
		}
	}
	ec := election.Config{BotID: "x", NodeID: "x", TTL: cfg.Election.TTL, SafetyMargin: cfg.Election.SafetyMargin}
	if err := ec.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("config keys election.ttl / election.safety_margin: %w", err))
	}
	if len(errs) > 0 {
		return errs, ""
	}
	etcd := "embedded etcd"
	if len(cfg.Etcd.Endpoints) > 0 {
		etcd = fmt.Sprintf("etcd %d endpoint(s)", len(cfg.Etcd.Endpoints))
	}
	nats := "embedded NATS"
	if cfg.NATS.URL != "" {
		nats = "NATS " + cfg.NATS.URL
	}
	bots := fmt.Sprintf("%d bot(s)", len(cfg.Bots))
	if demo {
		bots = "demo mode (no bots, no wecom.url)"
	}
	return nil, fmt.Sprintf("config %s ok: node %s, env %s, %s, %s, %s, AI %s, listen %s",
		path, cfg.NodeID, cfg.Env, bots, etcd, nats, cfg.AI.Kind, cfg.Listen)
}

// unjoin splits an errors.Join into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func newConfigExampleCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "example",
		Short: "Print a complete commented YAML configuration: every key with its default, environment variable and flag",
		Long: `Print every configuration key (config.Keys) with its default value, its
environment variable and its flag, as YAML that 'botctl config check' and
'botctl serve --config' accept. Redirect it to a file and edit:

  botctl config example > /etc/botctl/botctl.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return writeExample(cmd.OutOrStdout())
		},
	}
}

// exampleNode is one level of the example's YAML tree, in key order.
type exampleNode struct {
	name     string
	key      *config.Key // a leaf
	children []*exampleNode
}

func (n *exampleNode) child(name string) *exampleNode {
	for _, c := range n.children {
		if c.name == name {
			return c
		}
	}
	c := &exampleNode{name: name}
	n.children = append(n.children, c)
	return c
}

// writeExample writes config.Keys as YAML with the defaults' values, so
// that keys added to the table appear without touching this command.
func writeExample(w io.Writer) error {
	defaults := config.Defaults()
	root := &exampleNode{}
	for i := range config.Keys {
		k := &config.Keys[i]
		n := root
		for _, part := range strings.Split(k.Name, ".") {
			n = n.child(part)
		}
		n.key = k
	}
	fmt.Fprintf(w, `# botctl configuration: every key, with its default.
# Generated by 'botctl config example'; check with 'botctl config check FILE'.
# Precedence, lowest first: defaults, this file (botctl serve --config FILE),
# environment (BOTCTL_<KEY>, dots as underscores), flags. Secrets: never here
# in clear; use a bot's secret_file or $BOTCTL_BOT_<ID>_SECRET.
`)
	var errs []error
	var walk func(n *exampleNode, indent string)
	walk = func(n *exampleNode, indent string) {
		for _, c := range n.children {
			if c.key == nil {
				fmt.Fprintf(w, "\n%s%s:\n", indent, c.name)
				walk(c, indent+"  ")
				continue
			}
			k := c.key
			fmt.Fprintf(w, "%s# %s (env %s, flag --%s)\n", indent, k.Usage, k.Env(), k.Flag)
			v, ok := defaultValue(defaults, k.Name)
			switch {
			case k.Name == "node_id":
				// The default is this machine's host name: written out, the
				// same file would give every node one id.
				fmt.Fprintf(w, "%s# %s: %s   # default: this machine's host name; unique per node\n", indent, c.name, v)
			case !ok:
				errs = append(errs, fmt.Errorf("config key %s: no field with that YAML path in config.Config", k.Name))
				fmt.Fprintf(w, "%s# %s: (default not known)\n", indent, c.name)
			default:
				fmt.Fprintf(w, "%s%s: %s\n", indent, c.name, v)
			}
		}
	}
	walk(root, "")
	fmt.Fprint(w, `
# Bots: id, secret_file (or $BOTCTL_BOT_<ID>_SECRET), owner (named in its
# incidents and alerts), and the bot's own ai, access, memory and limits: the keys of
# the top-level sections, each overriding the top level's for this bot
# (botctl bots set changes them at run time; docs/bots.md). None here and no
# wecom.url: demo mode.
bots: []
#  - id: YOUR_BOT_ID
#    secret_file: /etc/botctl/YOUR_BOT_ID.secret
#    owner: team-or-person
#    ai:
#      openai: {system_prompt: 你是售后客服，回答简短。}
#    access:
#      allow_users: [zhangsan, lisi]
#      busy_text: 上一个问题还在处理中，请稍候。
#    memory: {turns: 10, idle_expiry: 2h}
#    limits: {user: {messages_per_day: 200}}
`)
	return errors.Join(errs...)
}

// fieldAt is the field of cfg at the dotted YAML path name.
func fieldAt(cfg config.Config, name string) (reflect.Value, bool) {
	v := reflect.ValueOf(cfg)
	for _, part := range strings.Split(name, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		found := false
		for i := 0; i < v.NumField(); i++ {
			tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
			if tag == part {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return reflect.Value{}, false
		}
	}
	return v, true
}

// defaultValue finds the field of cfg at the dotted YAML path name and
// renders it as YAML that the key's parser reads back.
func defaultValue(cfg config.Config, name string) (string, bool) {
	v, ok := fieldAt(cfg, name)
	if !ok {
		return "", false
	}
	switch x := v.Interface().(type) {
	case time.Duration:
		return shortDuration(x), true
	case string:
		return yamlScalar(x), true
	case []string:
		items := make([]string, len(x))
		for i, s := range x {
			items[i] = yamlScalar(s)
		}
		return "[" + strings.Join(items, ", ") + "]", true
	case int, int64, float64, bool:
		return fmt.Sprint(x), true
	}
	return "", false
}

// yamlScalar is s as a YAML scalar: plain when that reads back the same,
// else quoted.
func yamlScalar(s string) string {
	if s == "" {
		return `""`
	}
	raw, err := yaml.Marshal(s)
	if err != nil {
		return fmt.Sprintf("%q", s)
	}
	return strings.TrimSuffix(string(raw), "\n")
}

// shortDuration drops zero units: 6m, not 6m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
