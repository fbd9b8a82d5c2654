package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/botsettings"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/fleet"
	"github.com/botctl/botctl/pkg/node"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.yaml.in/yaml/v3"
)

const botsSettingsHelp = `A bot's settings are, field by field, lowest first: the config file's top
level (after BOTCTL_* and flags), the bot's entry in the file (bots[].ai,
bots[].access, bots[].memory, bots[].limits), then its override in etcd,
under the cluster's prefix at /botctl/settings/<bot>, which 'bots set'
writes and every node watches and applies within seconds, no restart.

The override is a document of the bot entry's sections with the same keys
(YAML or JSON):

  ai:
    kind: openai
    openai: {model: gpt-4o-mini, system_prompt: "你是客服助手，回答简短。"}
  access:
    allow_users: [alice, bob]
    busy_text: 上一个问题还在回答中，请稍候。
  memory: {turns: 10, idle_expiry: 2h}

Keys that name a program, a file, an environment variable or an endpoint
(ai.exec.command, ai.exec.env, ai.exec.dir, *_file, *_env, *url) are refused
at run time: they stay in the config file. Give --config the nodes' file:
the override is checked over that bot's settings in it before it is
stored, and a bad one is refused with its key named (nothing stored).`

const botsSetChecksHelp = `Before it stores anything, 'bots set' builds the bot's AI backend from the
result here, on this machine, as a node would (a dry run), when the
override changes the ai section of --config's settings: a backend that
cannot be built (an API key variable not set, a key file not there, a
program not found) is refused, naming what is missing. Run it with the
nodes' environment (their EnvironmentFile), or give --force. It also
refuses a bot that no registered node serves (a typo in --bot), unless
--force. A node that cannot apply an override it receives keeps serving
the bot with what it had (at start: the config file's settings) and says
so in 'botctl status', /readyz's warnings and botctl_bot_settings_refused.`

func newBotsSetCmd() *cobra.Command {
	var (
		cf    clusterFlags
		bot   string
		file  string
		sets  []string
		clear bool
		force bool
	)
	cmd := &cobra.Command{
		Use:   "set --bot ID [--file FILE|-] [--set KEY=VALUE]... [--force] | --clear",
		Short: "Change a bot's settings at run time: its override in etcd, checked before it is stored",
		Long: botsSettingsHelp + `

--file replaces the stored override with FILE's document ("-": stdin);
--set KEY=VALUE (repeatable) sets one key, over --file's document or, without
--file, over the stored one (the rest stays). VALUE is YAML: [a, b] is a
list. --clear removes the override: the file's settings apply again.

` + botsSetChecksHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if bot == "" {
				return usageErrorf("--bot is required")
			}
			if clear == (file != "" || len(sets) > 0) {
				return usageErrorf("give --file and/or --set, or --clear alone")
			}
			base, _, err := fileSettings(cf.config, bot)
			if err != nil {
				return err
			}
			if cf.config == "" && !clear {
				fmt.Fprintln(cmd.ErrOrStderr(), "note: no --config: the change is checked over the defaults (and BOTCTL_*), not over the nodes' file; give --config their file")
			}
			return cf.onEtcd(cmd, func(ctx context.Context, cli *clientv3.Client) error {
				if clear {
					if err := botsettings.Delete(ctx, cli, prefix, bot); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "bot %s: override removed; every node applies the config file's settings within seconds\n", bot)
					return nil
				}
				cur, err := botsettings.Get(ctx, cli, prefix, bot)
				if err != nil {
					return err
				}
				doc := cur.Doc
				if file != "" {
					if doc, err = readSettings(cmd.InOrStdin(), file); err != nil {
						return usageError{err}
					}
				}
				if doc == nil {
					doc = map[string]any{}
				}
				for _, kv := range sets {
					k, v, ok := strings.Cut(kv, "=")
					if !ok {
						return usageErrorf("--set %q: want KEY=VALUE, e.g. --set access.busy_text=请稍候", kv)
					}
					if err := config.SetKey(doc, k, v); err != nil {
						return usageErrorf("--set: %v", err)
					}
				}
				if !force {
					if err := checkSet(ctx, cli, bot, doc, base); err != nil {
						return err
					}
				}
				rev, err := botsettings.Put(ctx, cli, prefix, bot, doc, base, cur.Rev)
				if errors.Is(err, botsettings.ErrInvalid) {
					return usageError{fmt.Errorf("bot %s: %w; nothing stored, the bot keeps its settings", bot, err)}
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "bot %s: override stored at revision %d (%s); every node applies it within seconds\n", bot, rev, botsettings.Key(prefix, bot))
				return nil
			})
		},
	}
	cf.registerEtcd(cmd)
	cmd.Flags().StringVar(&bot, "bot", "", "bot id")
	cmd.Flags().StringVar(&file, "file", "", `the override document, YAML or JSON ("-": stdin); replaces the stored one`)
	cmd.Flags().StringArrayVar(&sets, "set", nil, "KEY=VALUE: set one key (e.g. ai.openai.system_prompt=…); repeatable")
	cmd.Flags().BoolVar(&clear, "clear", false, "remove the override: the config file's settings apply again")
	cmd.Flags().BoolVar(&force, "force", false, "store the override even when its backend cannot be built on this machine or no registered node serves the bot")
	return cmd
}

// checkSet is what 'bots set' checks before it stores doc as bot's
// override over base, besides what botsettings.Put checks: the bot's
// backend can be built here (a dry run of what each node does: only when
// the override changes the ai section, a node otherwise keeping the
// backend it built of its file), and a registered node serves the bot.
// The error says nothing was stored.
func checkSet(ctx context.Context, cli *clientv3.Client, bot string, doc map[string]any, base config.BotSettings) error {
	s, err := botsettings.Check(base, doc)
	if err != nil {
		return usageError{fmt.Errorf("bot %s: %w; nothing stored, the bot keeps its settings", bot, err)}
	}
	if !reflect.DeepEqual(s.AI, base.AI) { // else the file's backend, which the nodes built already
		if _, err := ai.New(s.AI); err != nil {
			return usageError{fmt.Errorf("bot %s: the AI backend of these settings cannot be built on this machine: %w; nothing stored, the bot keeps its settings "+
				"(a node without it would refuse the override too: run bots set with the nodes' environment and --config, or give --force to store it anyway)", bot, err)}
		}
	}
	nodes, err := node.Nodes(ctx, cli, prefix)
	if err != nil {
		return err
	}
	var serving []string
	for _, n := range nodes {
		if _, ok := n.Bots[bot]; ok {
			return nil
		}
		var ids []string
		for id := range n.Bots {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		serving = append(serving, fmt.Sprintf("%s serves %s", n.ID, strings.Join(ids, ", ")))
	}
	registered := "no node is registered"
	if len(serving) > 0 {
		registered = "registered: " + strings.Join(serving, "; ")
	}
	return usageError{fmt.Errorf("bot %s: no registered node serves it (%s); nothing stored: check --bot, or give --force to store it for nodes yet to serve it", bot, registered)}
}

func readSettings(stdin io.Reader, file string) (map[string]any, error) {
	var raw []byte
	var err error
	if file == "-" {
		raw, err = io.ReadAll(stdin)
	} else {
		raw, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("--file: %w", err)
	}
	doc, err := config.ParseSettings(raw)
	if err != nil {
		return nil, fmt.Errorf("--file %s: %w", file, err)
	}
	return doc, nil
}

// fileSettings are bot's settings in the config file at path (and the
// environment), validated, and the bots the file lists.
func fileSettings(path, bot string) (config.BotSettings, []string, error) {
	cfg, err := config.Load(path, os.Environ())
	if err != nil {
		return config.BotSettings{}, nil, usageError{err}
	}
	var ids []string
	for _, b := range cfg.Bots {
		ids = append(ids, b.ID)
	}
	s, err := cfg.BotSettings(bot)
	if err == nil && bot != "" {
		err = s.Validate()
	}
	if err != nil {
		return s, ids, usageError{fmt.Errorf("bot %s in --config %s: %w (fix the file first)", bot, path, err)}
	}
	return s, ids, nil
}

// botSettingsView is one bot in 'bots show --json'.
type botSettingsView struct {
	Bot string `json:"bot"`
	// Source is where the bot is defined: "config" (--config's bots),
	// "registry" (the bot registry in etcd), "config+registry" (both:
	// the file's entry wins), or "" (neither: an override alone).
	Source string `json:"source"`
	// Key is the override's etcd key.
	Key string `json:"key"`
	// Revision is the override's etcd revision (0: none stored).
	Revision int64 `json:"revision"`
	// Override is the document stored (null: none).
	Override map[string]any `json:"override"`
	// Effective is what the bot runs with: --config's settings of the
	// bot under the override, every key not zero.
	Effective map[string]any `json:"effective"`
	// Error, if set, is why the override does not apply over --config's
	// settings (the nodes refuse it too, if their file is the same).
	Error string `json:"error,omitempty"`
}

func newBotsShowCmd() *cobra.Command {
	var (
		cf     clusterFlags
		bot    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "show [--bot ID] [--json]",
		Short: "Show a bot's settings: its override in etcd and what it runs with",
		Long: botsSettingsHelp + `

Without --bot: every bot of --config, of the bot registry in etcd and with an
override. "source" says where the bot is defined: config, registry, or
config+registry (the file's entry wins); a registered bot's effective settings
are --config's top level under its record's settings, then the override.
--json prints one object ({"bot", "source", "key", "revision", "override",
"effective", "error"}) with --bot, else an array of them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, ids, err := fileSettings(cf.config, "")
			if err != nil {
				return err
			}
			return cf.onEtcd(cmd, func(ctx context.Context, cli *clientv3.Client) error {
				views, err := showSettings(ctx, cli, cf.config, bot, ids)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if asJSON {
					enc := json.NewEncoder(out)
					enc.SetIndent("", "  ")
					if bot != "" {
						return enc.Encode(views[0])
					}
					return enc.Encode(views)
				}
				for i, v := range views {
					if i > 0 {
						fmt.Fprintln(out)
					}
					writeSettingsView(out, v)
				}
				return nil
			})
		},
	}
	cf.registerEtcd(cmd)
	cmd.Flags().StringVar(&bot, "bot", "", "bot id (default: every bot)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func showSettings(ctx context.Context, cli *clientv3.Client, path, bot string, ids []string) ([]botSettingsView, error) {
	inFile := map[string]bool{}
	for _, id := range ids {
		inFile[id] = true
	}
	registered, err := registeredBots(ctx, cli, bot)
	if err != nil {
		return nil, err
	}
	overrides := map[string]botsettings.Override{}
	fromFile := len(ids)
	if bot != "" {
		o, err := botsettings.Get(ctx, cli, prefix, bot)
		if err != nil {
			return nil, err
		}
		overrides[bot], ids = o, []string{bot}
	} else {
		all, _, err := botsettings.List(ctx, cli, prefix)
		if err != nil && all == nil {
			return nil, err
		}
		for _, o := range all {
			overrides[o.Bot] = o
			if !slices.Contains(ids, o.Bot) {
				ids = append(ids, o.Bot)
			}
		}
		for id := range registered {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids[fromFile:]) // the file's order, then the others by id
	}
	var views []botSettingsView
	for _, id := range ids {
		o := overrides[id]
		rec, isReg := registered[id]
		v := botSettingsView{Bot: id, Source: botSource(inFile[id], isReg), Key: botsettings.Key(prefix, id), Revision: o.Rev, Override: o.Doc}
		base, _, err := fileSettings(path, id)
		if err == nil && isReg && !inFile[id] && len(rec.Settings) > 0 {
			base, err = botsettings.Check(base, rec.Settings) // the record's sections, as a file entry's
		}
		s := base
		if err == nil && o.Doc != nil {
			s, err = botsettings.Check(base, o.Doc)
		}
		if err != nil {
			v.Error = err.Error()
		}
		v.Effective = s.Doc()
		views = append(views, v)
	}
	return views, nil
}

// registeredBots are the bot registry's records: bot's alone when set.
func registeredBots(ctx context.Context, cli *clientv3.Client, bot string) (map[string]fleet.Bot, error) {
	out := map[string]fleet.Bot{}
	if bot != "" {
		b, err := fleet.Get(ctx, cli, prefix, bot)
		if errors.Is(err, fleet.ErrNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out[bot] = b
		return out, nil
	}
	all, _, err := fleet.List(ctx, cli, prefix)
	if err != nil && all == nil {
		return nil, err
	}
	for _, b := range all {
		out[b.ID] = b
	}
	return out, nil
}

// botSource is botSettingsView.Source.
func botSource(inFile, registered bool) string {
	switch {
	case inFile && registered:
		return "config+registry"
	case inFile:
		return "config"
	case registered:
		return "registry"
	}
	return ""
}

func writeSettingsView(w io.Writer, v botSettingsView) {
	switch v.Source {
	case "config":
		fmt.Fprintf(w, "bot %s: defined in --config\n", v.Bot)
	case "registry":
		fmt.Fprintf(w, "bot %s: defined in the bot registry (%s; botctl bots list)\n", v.Bot, fleet.Key(prefix, v.Bot))
	case "config+registry":
		fmt.Fprintf(w, "bot %s: defined in --config and in the bot registry (%s): the file's entry wins\n", v.Bot, fleet.Key(prefix, v.Bot))
	default:
		fmt.Fprintf(w, "bot %s: defined in neither --config nor the bot registry\n", v.Bot)
	}
	if v.Override == nil {
		fmt.Fprintf(w, "bot %s: no override in etcd (%s): the config file's settings\n", v.Bot, v.Key)
	} else {
		fmt.Fprintf(w, "bot %s: override in etcd (%s, revision %d):\n", v.Bot, v.Key, v.Revision)
		writeYAML(w, v.Override)
	}
	if v.Error != "" {
		fmt.Fprintf(w, "  refused over --config: %s\n", v.Error)
	}
	fmt.Fprintln(w, "effective (--config's settings of the bot, under the override):")
	writeYAML(w, v.Effective)
}

func writeYAML(w io.Writer, doc map[string]any) {
	var buf strings.Builder
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		fmt.Fprintf(w, "  (%v)\n", err)
		return
	}
	for _, l := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
		fmt.Fprintln(w, "  "+l)
	}
}
