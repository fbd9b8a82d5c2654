package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/buildinfo"
	"github.com/botctl/botctl/pkg/compaction"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/demoui"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/botctl/botctl/pkg/redact"
	botserve "github.com/botctl/botctl/pkg/serve"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const demoBot = "demo"

func newServeCmd() *cobra.Command {
	var (
		configPath  string
		bots        []string
		demo        bool
		demoListen  string
		allowRemote bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a botctl node: campaign for each bot, hold its WeCom connection while leading",
		Long: `Run a botctl node. Every node runs the same binary; per bot, an etcd election
picks the one node that holds the bot's WeCom connection.

With no --etcd and no --nats, an embedded single-node etcd and an embedded
NATS server (JetStream) start in --data-dir. With no bots and no --wecom-url
(or with --demo), an in-process WeCom simulator starts with a demo bot, so
the node runs with no setup at all.

Configuration: --config FILE (YAML), then BOTCTL_* environment variables,
then flags. Bot secrets: --bot ID with $BOTCTL_BOT_<ID>_SECRET, or
secret_file in the config file (--bot ID:SECRET works but puts the secret
in argv, where every user of the machine can read it: tests only). Secrets
are never logged. TLS, credentials and the node API's token:
docs/security.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(configPath, os.Environ())
			if err != nil {
				return usageError{err}
			}
			for _, k := range config.Keys {
				// The global flags (--log-level) are here too: cobra
				// merges the root's persistent flags into the command's.
				if f := cmd.Flags().Lookup(k.Flag); f != nil && f.Changed {
					if err := k.Set(&cfg, f.Value.String()); err != nil {
						return usageErrorf("--%s: %v", k.Flag, err)
					}
				}
			}
			for _, s := range bots {
				b, err := config.ParseBot(s)
				if err != nil {
					return usageErrorf("--bot %q: %v", redactBot(s), err)
				}
				cfg.Bots = append(cfg.Bots, b)
			}
			if err := cfg.Resolve(os.Environ()); err != nil {
				return usageError{err}
			}
			demo = demo || (len(cfg.Bots) == 0 && cfg.WeCom.URL == "")
			if demo {
				if err := checkLoopback(demoListen, allowRemote); err != nil {
					return usageErrorf("--demo-listen %s: %v: the demo's simulator has no authentication, so anyone who reaches it can act as any user and read every transcript. "+
						"Give --allow-remote to listen there anyway (a demo on a trusted network)", demoListen, err)
				}
			}
			if demo && len(cfg.Bots) == 0 {
				cfg.Bots = []config.Bot{{ID: demoBot, Secret: demoBot + "-secret"}}
				if cfg.AI.ShowThinking == "" {
					cfg.AI.ShowThinking = config.ShowThinkingOn // the demo bot's thinking, folded as WeCom shows it
				}
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			logger = newLogger(cfg.Log.Level, cfg.Log.Format, os.Stderr, stderrColour())
			for _, w := range config.UnknownEnv(os.Environ(), cfg) {
				logger.Warn().Msg(w)
			}
			if _, err := ai.New(cfg.AI); err != nil {
				return usageError{err} // what depends on the machine: the exec command, its dir, the API key's variable
			}
			ec := election.Config{BotID: "x", NodeID: "x", TTL: cfg.Election.TTL, SafetyMargin: cfg.Election.SafetyMargin}
			if err := ec.Validate(); err != nil {
				return usageErrorf("config keys election.ttl / election.safety_margin: %v", err)
			}
			return serve(cmd.Context(), cmd, cfg, demo, demoListen)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "YAML config file")
	defaults := config.Defaults()
	for _, k := range config.Keys {
		if !globalKeyFlags[k.Flag] {
			addKeyFlag(f, k, defaults)
		}
	}
	f.StringArrayVar(&bots, "bot", nil, "bot as ID with $BOTCTL_BOT_<ID>_SECRET set (repeatable; ID:SECRET puts the secret in argv: tests only)")
	f.BoolVar(&demo, "demo", false, "start an in-process WeCom simulator (default when no bots and no --wecom-url are given)")
	f.StringVar(&demoListen, "demo-listen", "127.0.0.1:8390", "the demo simulator's address (port 0 picks a free one)")
	f.BoolVar(&allowRemote, "allow-remote", false, "with --demo: allow a non-loopback --demo-listen (the simulator has no authentication: trusted networks only)")
	return cmd
}

// redactBot hides the secret of an ID:SECRET argument.
func redactBot(s string) string {
	if id, _, ok := strings.Cut(s, ":"); ok {
		return id + ":<redacted>"
	}
	return s
}

func serve(ctx context.Context, cmd *cobra.Command, cfg config.Config, demo bool, demoListen string) error {
	log := logger.With().Str("node", cfg.NodeID).Logger()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	out := cmd.OutOrStdout()

	// Listen first: a port in use is the commonest start failure, and
	// failing here is cheap.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w (is another node using this port?)", cfg.Listen, err)
	}
	defer ln.Close()

	endpoints := cfg.Etcd.Endpoints
	if len(endpoints) == 0 {
		e, _, err := infra.StartEtcdOnFreePorts(ctx, infra.EtcdConfig{DataDir: cfg.DataDir, Logger: logger})
		if err != nil {
			return fmt.Errorf("embedded etcd: %w", err)
		}
		defer e.Close()
		endpoints = e.Endpoints()
		epFile := filepath.Join(cfg.DataDir, endpointFile)
		if err := os.WriteFile(epFile, []byte(strings.Join(endpoints, ",")+"\n"), 0o600); err != nil {
			return err
		}
		defer os.Remove(epFile)
		log.Info().Str("endpoint", endpoints[0]).Msg("embedded etcd running")
	}
	if cfg.NATS.URL == "" {
		n, err := infra.StartNATS(infra.NATSConfig{DataDir: cfg.DataDir, Addr: "127.0.0.1:-1", Logger: logger})
		if err != nil {
			return fmt.Errorf("embedded NATS: %w", err)
		}
		defer n.Close()
		cfg.NATS.URL = n.ClientURL()
		urlFile := filepath.Join(cfg.DataDir, natsURLFile)
		if err := os.WriteFile(urlFile, []byte(cfg.NATS.URL+"\n"), 0o600); err != nil {
			return err
		}
		defer os.Remove(urlFile)
		log.Info().Str("url", cfg.NATS.URL).Msg("embedded NATS (JetStream) running")
	}

	if demo {
		sim := wecomsim.New(wecomsim.Config{Logger: logger.With().Str("component", "wecomsim").Logger()})
		for _, b := range cfg.Bots {
			if err := sim.AddBot(b.ID, b.Secret); err != nil {
				return err
			}
		}
		sln, err := net.Listen("tcp", demoListen)
		if err != nil {
			return fmt.Errorf("--demo-listen %s: %w", demoListen, err)
		}
		go sim.Serve(sln)
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			sim.Shutdown(sctx)
		}()
		addr := sln.Addr().String()
		cfg.WeCom.URL = "ws://" + addr + "/"
		if cfg.Backfill.HistoryURL == "" {
			cfg.Backfill.HistoryURL = "http://" + addr // missed messages are found in the simulator's history
		}
		fmt.Fprintf(out, "demo: WeCom simulator at ws://%s/ with bot %q; act as a user with\n"+
			"  curl -s http://%s/control/messages -d '{\"bot_id\":\"%s\",\"user_id\":\"alice\",\"text\":\"hello\"}'\n"+
			"  curl -s 'http://%s/control/transcript?bot_id=%s&chat=alice'\n",
			addr, cfg.Bots[0].ID, addr, cfg.Bots[0].ID, addr, cfg.Bots[0].ID)
	}

	ec := cfg.Etcd
	ec.Endpoints = endpoints
	cli, err := newEtcdClient(ec)
	if err != nil {
		return err
	}
	defer cli.Close()
	if c, ok := externalCompactor(cfg, cli, logger); ok {
		cctx, stopCompacting := context.WithCancel(ctx)
		compacted := make(chan struct{})
		go func() {
			defer close(compacted)
			c.Run(cctx)
		}()
		defer func() { stopCompacting(); <-compacted }()
	}
	natsOpts, err := cfg.NATS.Options()
	if err != nil {
		return usageError{err}
	}

	ids := make([]string, len(cfg.Bots))
	for i, b := range cfg.Bots {
		ids[i] = b.ID
	}
	return botserve.Run(ctx, botserve.Options{
		Config: cfg, Etcd: cli, NATSURL: cfg.NATS.URL, NATSOptions: natsOpts, Listener: ln, Version: buildinfo.String(), Logger: logger,
		Ready: func(*botserve.Node) {
			// The scheme the API is served with: https when api.cert_file is
			// set (serve's apiListener wraps the listener in TLS then).
			scheme := "http"
			if cfg.API.CertFile != "" {
				scheme = "https"
			}
			fmt.Fprintf(out, "botctl node %s serving bots [%s]; API %s://%s/status; etcd %s; AI %s\n",
				cfg.NodeID, strings.Join(ids, " "), scheme, ln.Addr(), strings.Join(redact.URLs(endpoints), ","), cfg.AI.Kind)
			if demoui.SimulatorURL(cfg.WeCom.URL) != "" {
				fmt.Fprintln(out, demoPageLine(cfg, fmt.Sprintf("%s://%s%s", scheme, ln.Addr(), demoui.Path)))
			}
		},
	})
}

// demoPageLine tells where the demo page is. The page's chat needs the
// node API's token: the link carries it in its fragment, which a browser
// never sends to the server, so that the link opens as printed. Only the
// token the node generated for itself is printed so (a demo's, in its data
// dir); the token of api.token_file, the operator's, is never printed: the
// link then reads it from its file in the shell.
func demoPageLine(cfg config.Config, page string) string {
	const what = "to chat as a WeCom user and watch the cluster (leader, nodes, tasks, incidents)"
	if cfg.API.TokenFile == "" {
		if raw, err := os.ReadFile(apiTokenPath(cfg)); err == nil {
			if tok := strings.TrimSpace(string(raw)); tok != "" {
				return fmt.Sprintf("demo page: open %s#token=%s %s", page, url.QueryEscape(tok), what)
			}
		}
	}
	return fmt.Sprintf("demo page: open \"%s#token=$(cat %s)\" %s", page, apiTokenPath(cfg), what)
}

// apiTokenPath is where the node API's token is: api.token_file, else the
// file the node generates in its data dir.
func apiTokenPath(cfg config.Config) string {
	if cfg.API.TokenFile != "" {
		return cfg.API.TokenFile
	}
	return filepath.Join(cfg.DataDir, config.GeneratedTokenFile)
}

// externalCompactor is the compactor serve runs, ok when it runs one: for
// an external etcd (etcd.endpoints), which may not compact itself, every
// etcd.compact_retention unless that is 0. The embedded etcd compacts
// itself.
func externalCompactor(cfg config.Config, cli *clientv3.Client, logger zerolog.Logger) (compaction.Compactor, bool) {
	if len(cfg.Etcd.Endpoints) == 0 || cfg.Etcd.CompactRetention <= 0 {
		return compaction.Compactor{}, false
	}
	return compaction.Compactor{Client: cli, Retention: cfg.Etcd.CompactRetention, Log: logger.With().Str("component", "compaction").Logger()}, true
}
