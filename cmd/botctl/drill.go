package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/botctl/botctl/pkg/heal/drill"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/node"
	"github.com/spf13/cobra"
)

func newDrillCmd() *cobra.Command {
	var (
		cf       clusterFlags
		cfg      drill.Config
		asJSON   bool
		jsonl    bool
		failLost bool
	)
	cmd := &cobra.Command{
		Use:   "drill --bot ID --kind drop|revoke|silence|stall|kill-leader|group-silence [--rounds N] --sim http://HOST:PORT [--json|--json-lines]",
		Short: "Force an outage through the simulator, send user traffic through it, and print T1, T2, T3 and messages lost",
		Long: `drill forces an outage on purpose, through the WeCom simulator's fault API, while
user traffic flows, and measures the incident it causes from outside: T1 (from the
injection to detection), T2 (to the first action), T3 (back → data complete),
downtime, and every user message that got no answer. It refuses to run against a
WeCom URL that is not botctl's simulator, and for a bot that has never connected to
that simulator (its nodes use another WeCom URL).

  revoke       the drill plays the person: it restores the secret after --fix-after
               and acknowledges the incident
  kill-leader  SIGKILL of the leading node's process; it must run on this machine,
               and something (systemd, the test harness) should restart it
  group-silence
               the simulator withholds group callbacks (direct ones still arrive)
               until the next subscribe; every fifth message is sent in --group.
               Expected: a route_silence incident, exactly one resubscribe, and
               the group answered again. A group is judged against its own
               baseline: first, group messages are sent until it has one
               (health.silence_min_watched of them, 10 min by default; --warm-up
               bounds the wait)

  --wecom-history (with --kind drop --duration D: a gap) reads the gap from WeCom's
  own message history instead of backfill.history_url: each round authorizes
  the bot's msg history at the simulator (it stays authorized) and fails unless
  the bot asked for its msg MCP server and answered the gap's messages late. The
  bot's nodes must run with backfill.history_url unset.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(drill.Kinds, cfg.Kind) {
				return usageErrorf("--kind %q: want one of %s", cfg.Kind, strings.Join(drill.Kinds, ", "))
			}
			if cfg.Bot == "" {
				return usageErrorf("which bot? give --bot ID")
			}
			if cfg.Sim == "" {
				return usageErrorf("where is the simulator? give --sim http://HOST:PORT (its control API)")
			}
			if cfg.WeComHistory && (cfg.Kind != drill.KindDrop || cfg.Duration <= 0) {
				return usageErrorf("--wecom-history reads a gap from WeCom's message history: give it with --kind drop and a --duration (e.g. 2m)")
			}
			if asJSON && jsonl {
				return usageErrorf("give --json or --json-lines, not both")
			}
			st, closeFn, err := cf.store()
			if err != nil {
				return err
			}
			defer closeFn()
			cfg.Incidents, cfg.Health = incident.NewStore(st.Incidents()), st.Health()
			if cfg.Kind == drill.KindKillLeader {
				cli, err := cf.etcdClient()
				if err != nil {
					return err
				}
				defer cli.Close()
				cfg.Nodes = func(ctx context.Context) ([]node.Info, error) { return node.Nodes(ctx, cli, prefix) }
			}
			// Progress goes to stderr whatever stdout prints: a round
			// waits minutes for its incident, and a script reading
			// --json from stdout still shows what it waits for.
			cfg.Progress = cmd.ErrOrStderr()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			d, err := drill.New(ctx, cfg)
			if errors.Is(err, drill.ErrNotSimulator) {
				return usageErrorf("%v", err)
			}
			if err != nil {
				return err
			}
			out := &drillOutput{w: cmd.OutOrStdout(), bot: cfg.Bot, kind: cfg.Kind, json: asJSON, lines: jsonl}
			rounds, err := d.Run(ctx, out.round)
			if perr := out.end(rounds); perr != nil {
				return perr
			}
			if err != nil {
				return err
			}
			sum := drill.Summarize(rounds)
			if failLost && (sum.Lost > 0 || sum.Failed > 0) {
				return fmt.Errorf("drill: %d message(s) lost, %d round(s) failed", sum.Lost, sum.Failed)
			}
			return nil
		},
	}
	cf.registerNATS(cmd)
	cmd.Flags().StringVar(&cfg.Bot, "bot", "", "the bot to drill")
	cmd.Flags().StringVar(&cfg.Kind, "kind", "", "drop, revoke, silence, stall, kill-leader or group-silence")
	cmd.Flags().IntVar(&cfg.Rounds, "rounds", 1, "rounds to run")
	cmd.Flags().StringVar(&cfg.Sim, "sim", "", "the simulator's control API, http://HOST:PORT")
	cmd.Flags().StringVar(&cf.etcd, "etcd", "", "etcd endpoints (kill-leader only; default $BOTCTL_ETCD_ENDPOINTS, else --data-dir's embedded etcd)")
	cmd.Flags().DurationVar(&cfg.Interval, "interval", time.Second, "one user message per this, each from its own conversation")
	cmd.Flags().DurationVar(&cfg.Duration, "duration", 0, "how long a silence (default 30s) or a stall (default 20s) lasts; for a drop, reconnecting is refused this long (a gap)")
	cmd.Flags().DurationVar(&cfg.FixAfter, "fix-after", 10*time.Second, "revoke: restore the secret and acknowledge this long after the incident opened")
	cmd.Flags().DurationVar(&cfg.Settle, "settle", 3*time.Minute, "how long to wait for every answer after the incident closed")
	cmd.Flags().DurationVar(&cfg.Timeout, "round-timeout", 20*time.Minute, "bound of one round until its incident closes (then --settle bounds the wait for answers)")
	cmd.Flags().DurationVar(&cfg.AlertWait, "alert-wait", 75*time.Second, "after the last round, wait this long after its injection before reading the alerts (the merge window); negative: at once")
	cmd.Flags().BoolVar(&cfg.WeComHistory, "wecom-history", false, "drop with --duration: read the gap from WeCom's own message history (authorized at the simulator) and expect it answered late from there")
	cmd.Flags().StringVar(&cfg.Group, "group", drill.DefaultGroup, "group-silence: the group chat the drill talks in")
	cmd.Flags().DurationVar(&cfg.WarmUp, "warm-up", 20*time.Minute, "group-silence: bound of the wait for the group's own silence baseline (group traffic meanwhile)")
	cmd.Flags().DurationVar(&cfg.MinWatched, "min-watched", 10*time.Minute, "group-silence: the nodes' health.silence_min_watched (when the group's baseline has an opinion)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: {\"bot\",\"kind\",\"rounds\":[…],\"summary\":{…}}")
	cmd.Flags().BoolVar(&jsonl, "json-lines", false, "print JSON lines: one {\"bot\",\"round\",…} as each round ends (its incident closed, its answers checked; no alerts yet), then --json's document on one line")
	cmd.Flags().BoolVar(&failLost, "fail-on-loss", false, "exit 1 if a message was lost or a round failed")
	return cmd
}

// drillOutput prints a drill on stdout: each round as it ends (its
// incident closed and its answers checked), then all of them with their
// alerts and the summary. --json prints the one document at the end only
// (a single JSON value, as scripts parse it); --json-lines prints a line
// per round as it ends and that document last, on one line. A round's
// alerts are read once, after the last round (drill.Config.AlertWait: an
// automatic incident's alert waits for the merge window), so they are in
// the final output only.
type drillOutput struct {
	w           io.Writer
	bot, kind   string
	json, lines bool
}

// round prints r as it ends (drill.Drill.Run's each).
func (o *drillOutput) round(r drill.Round) {
	switch {
	case o.json:
	case o.lines:
		raw, err := json.Marshal(r)
		if err != nil {
			return
		}
		var m map[string]any
		if json.Unmarshal(raw, &m) != nil {
			return
		}
		for _, k := range []string{"alerts", "alert_kinds", "first_alert_s", "page_s"} {
			delete(m, k) // not read yet: in the last line
		}
		m["bot"] = o.bot
		line, _ := json.Marshal(m)
		fmt.Fprintf(o.w, "%s\n", line)
	case r.Error != "":
		fmt.Fprintf(o.w, "round %d (%s) failed: %s; %d sent, %d lost\n", r.N, r.Kind, r.Error, r.Sent, r.Lost)
	default:
		fmt.Fprintf(o.w, "round %d (%s) closed: incident %s, level %s, recovered %s: T1 %.2fs, T2 %.3fs, T3 %.2fs, down %.2fs; %d sent, %d lost\n",
			r.N, r.Kind, orDash(r.Incident), orDash(r.Level), orDash(r.Method), r.T1, r.T2, r.T3, r.Downtime, r.Sent, r.Lost)
	}
}

// end prints every round, with its alerts, and the summary.
func (o *drillOutput) end(rounds []drill.Round) error {
	if rounds == nil {
		rounds = []drill.Round{}
	}
	doc := map[string]any{"bot": o.bot, "kind": o.kind, "rounds": rounds, "summary": drill.Summarize(rounds)}
	switch {
	case o.json:
		return printJSON(o.w, doc)
	case o.lines:
		return json.NewEncoder(o.w).Encode(doc)
	}
	if len(rounds) > 0 {
		fmt.Fprintln(o.w)
	}
	printDrill(o.w, rounds)
	return nil
}

func printDrill(w io.Writer, rounds []drill.Round) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUND\tKIND\tINCIDENT\tLEVEL\tT1\tT2\tT3\tDOWN\tSENT\tLOST\tALERTS\tERROR")
	for _, r := range rounds {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.2fs\t%.3fs\t%.2fs\t%.2fs\t%d\t%d\t%d\t%s\n", r.N, r.Kind, orDash(r.Incident), orDash(r.Level),
			r.T1, r.T2, r.T3, r.Downtime, r.Sent, r.Lost, r.Alerts, r.Error)
	}
	tw.Flush()
	s := drill.Summarize(rounds)
	fmt.Fprintf(w, "%d round(s), %d failed: T1 p50 %.2fs p90 %.2fs max %.2fs; T2 p50 %.3fs max %.3fs (auto: %d, p50 %.3fs max %.3fs; human: %d, p50 %.3fs max %.3fs); T3 p50 %.2fs p90 %.2fs max %.2fs; %d sent, %d lost\n",
		s.Rounds, s.Failed, s.T1.Median, s.T1.P90, s.T1.Max, s.T2.Median, s.T2.Max, s.T2Auto.N, s.T2Auto.Median, s.T2Auto.Max, s.T2Human.N, s.T2Human.Median, s.T2Human.Max,
		s.T3.Median, s.T3.P90, s.T3.Max, s.Sent, s.Lost)
}
