package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/botctl/botctl/internal/oneline"
	clientv3 "go.etcd.io/etcd/client/v3"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/botctl/botctl/pkg/clusterkey"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/fleet"
	"github.com/spf13/cobra"
)

const botsRegistryHelp = `The bot registry keeps bots as data in etcd, beside the bots of the config
file: one record per bot under the cluster's prefix at /botctl/bots/<bot>,
its WeCom secret sealed (AES-256-GCM) under the cluster key, the file that
secrets.key_file names (env BOTCTL_SECRETS_KEY_FILE): 64 hexadecimal
characters, 'openssl rand -hex 32', the same file on every node. Give
--config the nodes' file (or set BOTCTL_SECRETS_KEY_FILE) so the secret is
sealed under their key. The secret is read from --secret-file, never from
the command line, and never printed.

A bot in both the config file and the registry is served as the file says:
the file's entry wins. Every running node follows the registry: a bot
added is campaigned for within 5 s, a bot removed is drained and let go,
a re-keyed one is handed over to its new secret (docs/bots.md, "Bots as
data").`

// registryKey is the cluster key of --config and the environment
// (secrets.key_file), and --config's top-level settings.
func registryKey(cf *clusterFlags) (*clusterkey.Key, config.Config, error) {
	cfg, err := config.Load(cf.config, os.Environ())
	if err != nil {
		return nil, cfg, usageError{err}
	}
	k, err := clusterkey.Load(cfg.Secrets.KeyFile)
	if err != nil {
		return nil, cfg, usageError{fmt.Errorf("%w (give --config the nodes' file, or set BOTCTL_SECRETS_KEY_FILE)", err)}
	}
	return k, cfg, nil
}

// readBotSecret reads the secret file of --secret-file; its errors never
// hold the content.
func readBotSecret(path string) ([]byte, error) {
	if path == "" {
		return nil, usageErrorf("--secret-file is required: the file that holds the bot's WeCom secret (never the secret itself on the command line)")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, usageErrorf("--secret-file: %v", err)
	}
	if strings.TrimSpace(string(raw)) == "" {
		return nil, usageErrorf("--secret-file %s is empty: write the bot's WeCom secret in it", path)
	}
	return raw, nil
}

func newBotsAddCmd() *cobra.Command {
	var (
		cf                                     clusterFlags
		bot, secretFile, env, owner, settingsF string
	)
	cmd := &cobra.Command{
		Use:   "add --bot ID --secret-file F [--env E] [--owner O] [--settings FILE]",
		Short: "Register a bot in etcd, its secret sealed under the cluster key",
		Long: botsRegistryHelp + `

--settings FILE is the bot's own sections (ai, access, memory, limits), YAML
or JSON, as in a bot's entry of the config file; checked over --config's top
level, and refused if a key names a program, a file, a variable or an
endpoint (those stay in the config file).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if bot == "" {
				return usageErrorf("--bot is required")
			}
			secret, err := readBotSecret(secretFile)
			if err != nil {
				return err
			}
			k, cfg, err := registryKey(&cf)
			if err != nil {
				return err
			}
			var doc map[string]any
			if settingsF != "" {
				if doc, err = readSettingsFile(settingsF); err != nil {
					return err
				}
			}
			b, err := fleet.New(k, bot, env, owner, doc, cfg.TopSettings(), secret, time.Now())
			if err != nil {
				return usageError{fmt.Errorf("%w; nothing stored", err)}
			}
			return cf.onEtcd(cmd, func(ctx context.Context, cli *clientv3.Client) error {
				rev, err := fleet.Add(ctx, cli, prefix, b)
				if errors.Is(err, fleet.ErrExists) {
					return usageError{err}
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "bot %s: registered at revision %d (%s), its secret sealed under cluster key %s\n", bot, rev, fleet.Key(prefix, bot), k.ID())
				for _, fb := range cfg.Bots {
					if fb.ID == bot {
						fmt.Fprintf(cmd.ErrOrStderr(), "note: bot %s is also in --config's bots: a node whose file lists it serves it as the file says (the file's entry wins)\n", bot)
					}
				}
				return nil
			})
		},
	}
	cf.registerEtcd(cmd)
	cmd.Flags().StringVar(&bot, "bot", "", "bot id")
	cmd.Flags().StringVar(&secretFile, "secret-file", "", "file holding the bot's WeCom secret")
	cmd.Flags().StringVar(&env, "env", "", "environment whose nodes may serve the bot")
	cmd.Flags().StringVar(&owner, "owner", "", "who answers for the bot (named in its incidents and alerts)")
	cmd.Flags().StringVar(&settingsF, "settings", "", "the bot's own settings, YAML or JSON (ai, access, memory, limits)")
	return cmd
}

func readSettingsFile(path string) (map[string]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, usageErrorf("--settings: %v", err)
	}
	doc, err := config.ParseSettings(raw)
	if err != nil {
		return nil, usageErrorf("--settings %s: %v", path, err)
	}
	return doc, nil
}

func newBotsRemoveCmd() *cobra.Command {
	var (
		cf  clusterFlags
		bot string
	)
	cmd := &cobra.Command{
		Use:   "remove --bot ID",
		Short: "Remove a bot from the registry in etcd",
		Long: botsRegistryHelp + `

Its task records stay where they are ('botctl tasks'); its settings override
('bots set'), if any, stays too: 'bots set --bot ID --clear' removes it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if bot == "" {
				return usageErrorf("--bot is required")
			}
			return cf.onEtcd(cmd, func(ctx context.Context, cli *clientv3.Client) error {
				if _, err := fleet.Remove(ctx, cli, prefix, bot); err != nil {
					if errors.Is(err, fleet.ErrNotFound) || errors.Is(err, fleet.ErrInvalid) {
						return usageError{err}
					}
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "bot %s: removed from the registry (%s)\n", bot, fleet.Key(prefix, bot))
				return nil
			})
		},
	}
	cf.registerEtcd(cmd)
	cmd.Flags().StringVar(&bot, "bot", "", "bot id")
	return cmd
}

func newBotsRotateSecretCmd() *cobra.Command {
	var (
		cf              clusterFlags
		bot, secretFile string
		wait            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "rotate-secret --bot ID --secret-file F [--wait D]",
		Short: "Replace a registered bot's secret, sealed under the cluster key",
		Long: botsRegistryHelp + `

The record's other fields stay. The new secret is sealed under --config's
cluster key: rotate-secret also moves a secret sealed under an older key to
the current one.

The node that leads the bot proves the new secret without a gap: its work on
the connection finishes (streams open are closed with the handover note, the
answers follow by push), then a second connection subscribes with the new
secret. WeCom accepts it: the new connection replaces the old one. WeCom
refuses it: the old connection stays (a failed subscribe does not kick it),
the old secret is restored in the registry, and rotate-secret fails with
WeCom's error. It waits --wait (default 30s; 0: not at all) for the outcome;
when no node leads the bot, none proves it, and the bot's next term connects
with the new secret.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if bot == "" {
				return usageErrorf("--bot is required")
			}
			secret, err := readBotSecret(secretFile)
			if err != nil {
				return err
			}
			k, _, err := registryKey(&cf)
			if err != nil {
				return err
			}
			return cf.onEtcd(cmd, func(ctx context.Context, cli *clientv3.Client) error {
				b, err := fleet.RotateSecret(ctx, cli, prefix, k, bot, secret, time.Now())
				if err != nil {
					if errors.Is(err, fleet.ErrNotFound) || errors.Is(err, fleet.ErrInvalid) || errors.Is(err, fleet.ErrChanged) {
						return usageError{err}
					}
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "bot %s: secret replaced at revision %d, sealed under cluster key %s\n", bot, b.Rev, k.ID())
				return awaitRotation(cmd, cli, bot, b.Rev, wait)
			})
		},
	}
	cf.registerEtcd(cmd)
	cmd.Flags().StringVar(&bot, "bot", "", "bot id")
	cmd.Flags().StringVar(&secretFile, "secret-file", "", "file holding the bot's new WeCom secret")
	cmd.Flags().DurationVar(&wait, "wait", 30*time.Second, "how long to wait for the leader to prove the new secret (0: do not wait)")
	return cmd
}

// registryView is one bot in 'bots list --json'. It has no secret.
type registryView struct {
	Bot   string `json:"bot"`
	Env   string `json:"env,omitempty"`
	Owner string `json:"owner,omitempty"`
	// SealedUnder is the id of the cluster key the secret is sealed under.
	SealedUnder string `json:"sealed_under"`
	// Settings are the record's own sections (null: the top level's).
	Settings map[string]any `json:"settings,omitempty"`
	// InConfig says --config's bots list it too: there, the file's entry wins.
	InConfig bool `json:"in_config"`
	// Rotation is the latest rotate-secret's state (pending, proved,
	// refused) and RotationError WeCom's refusal.
	Rotation      string    `json:"rotation,omitempty"`
	RotationError string    `json:"rotation_error,omitempty"`
	Created       time.Time `json:"created"`
	Updated       time.Time `json:"updated"`
	Revision      int64     `json:"revision"`
}

func newBotsListCmd() *cobra.Command {
	var (
		cf     clusterFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the bots registered in etcd (never their secrets)",
		Long: botsRegistryHelp + `

--json prints an array of {"bot", "env", "owner", "sealed_under", "settings",
"in_config", "rotation", "rotation_error", "created", "updated",
"revision"}. With --config, in_config says the file lists the bot too (its
entry wins); rotation is the latest rotate-secret's state (pending, proved,
refused) and rotation_error WeCom's refusal.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(cf.config, os.Environ())
			if err != nil {
				return usageError{err}
			}
			return cf.onEtcd(cmd, func(ctx context.Context, cli *clientv3.Client) error {
				bots, _, listErr := fleet.List(ctx, cli, prefix)
				if listErr != nil && bots == nil {
					return listErr
				}
				inFile := map[string]bool{}
				for _, b := range cfg.Bots {
					inFile[b.ID] = true
				}
				views := []registryView{}
				for _, b := range bots {
					v := registryView{Bot: b.ID, Env: b.Env, Owner: b.Owner, SealedUnder: b.Secret.KeyID, Settings: b.Settings,
						InConfig: inFile[b.ID], Created: b.Created, Updated: b.Updated, Revision: b.Rev}
					if r := b.Rotation; r != nil {
						v.Rotation, v.RotationError = r.State, r.Error
					}
					views = append(views, v)
				}
				out := cmd.OutOrStdout()
				if asJSON {
					enc := json.NewEncoder(out)
					enc.SetIndent("", "  ")
					if err := enc.Encode(views); err != nil {
						return err
					}
				} else {
					writeRegistry(out, views)
				}
				if listErr != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "skipped: %v\n", listErr)
				}
				return nil
			})
		},
	}
	cf.registerEtcd(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func writeRegistry(w io.Writer, views []registryView) {
	if len(views) == 0 {
		fmt.Fprintln(w, "no bot registered in etcd (botctl bots add)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BOT\tENV\tOWNER\tSEALED UNDER\tSETTINGS\tUPDATED\tNOTE")
	for _, v := range views {
		settings := "-"
		if len(v.Settings) > 0 {
			settings = "own"
		}
		var notes []string
		if v.InConfig {
			notes = append(notes, "also in --config: the file's entry wins")
		}
		switch v.Rotation {
		case fleet.RotationPending:
			notes = append(notes, "new secret not proved yet")
		case fleet.RotationRefused:
			notes = append(notes, "last rotate-secret refused by WeCom ("+oneline.Clip(v.RotationError, 120)+"): the old secret is kept")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Bot, dash(v.Env), dash(v.Owner), v.SealedUnder, settings, v.Updated.Format(time.RFC3339), strings.Join(notes, "; "))
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// awaitRotation reports the outcome of bot's rotation stored at rev, as
// the node that leads the bot records it, waiting at most wait.
func awaitRotation(cmd *cobra.Command, cli *clientv3.Client, bot string, rev int64, wait time.Duration) error {
	out := cmd.OutOrStdout()
	if wait <= 0 {
		fmt.Fprintf(out, "bot %s: not waiting for the new secret to be proved (see botctl bots list)\n", bot)
		return nil
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), wait)
	defer cancel()
	b, err := fleet.AwaitRotation(ctx, cli, prefix, bot, rev)
	switch {
	case err != nil && ctx.Err() != nil:
		fmt.Fprintf(out, "bot %s: no node proved the new secret within %s (does a node lead the bot? botctl status): the rotation stays pending, and the bot's next term connects with it\n", bot, wait)
		return nil
	case err != nil:
		return err
	case b.Rotation.State == fleet.RotationRefused:
		return fmt.Errorf("bot %s: WeCom refused the new secret (node %s): %s; the bot keeps its connection and its old secret: give the secret WeCom's admin console shows, then rotate again", bot, b.Rotation.Node, b.Rotation.Error)
	}
	fmt.Fprintf(out, "bot %s: the new secret is proved by node %s: the bot's connection uses it\n", bot, b.Rotation.Node)
	return nil
}
