package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/botctl/botctl/pkg/node"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BalanceView is `botctl bots balance --dry-run --json`: the plan the
// nodes' balancer makes of the cluster now, and the settings it was made
// with.
type BalanceView struct {
	DryRun bool `json:"dry_run"`
	node.BalancePlan
	Tolerance float64 `json:"tolerance"`
	// CooldownS: a bot moved by the balancer is not moved by it again for
	// this many seconds.
	CooldownS int64 `json:"cooldown_s"`
}

func newBotsBalanceCmd() *cobra.Command {
	var (
		cf             clusterFlags
		dryRun, asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "balance --dry-run [--json]",
		Short: "Print what the balancer would move now, and why",
		Long: `Every node runs the balancer: it keeps the number of bots each live node
leads within ±10 % of its even share (the bots the node may lead, by their
env gate, weighted by the nodes' election.balance.weight), moving a bot by a
graceful handover, and no bot more than once per cooldown (10 minutes)
unless its leader fails.

--dry-run reads the cluster from etcd and prints the plan the nodes make of
it now: each node's count against its share and band, each move (bot, from,
to, the standbys that step back first so that the new leader is next, and
why), and why a node left out of its band cannot be helped now. It moves
nothing.

--json prints {"dry_run", "spread": [{"node", "weight", "leads", "share",
"low", "high"}], "moves": [{"bot", "from", "to", "ahead", "reason"}],
"notes", "after", "tolerance", "cooldown_s"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !dryRun {
				return usageErrorf("give --dry-run: the nodes balance by themselves; this command prints what they would move now")
			}
			return cf.onEtcd(cmd, func(ctx context.Context, cli *clientv3.Client) error {
				plan, cfg, err := node.ReadBalancePlan(ctx, cli, prefix, "", time.Now())
				if err != nil {
					return err
				}
				v := BalanceView{DryRun: true, BalancePlan: plan, Tolerance: cfg.Tolerance, CooldownS: int64(cfg.Cooldown / time.Second)}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), v)
				}
				printBalance(cmd.OutOrStdout(), v)
				return nil
			})
		},
	}
	cf.registerEtcd(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan; move nothing (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printBalance(w io.Writer, v BalanceView) {
	if len(v.Spread) == 0 {
		fmt.Fprintln(w, "no live node may lead a bot: nothing to balance")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tWEIGHT\tLEADS\tSHARE\tBAND (±%.0f%%)\tAFTER\n", 100*v.Tolerance)
	for _, s := range v.Spread {
		fmt.Fprintf(tw, "%s\t%g\t%d\t%.1f\t%d–%d%s\t%d\n", s.Node, s.Weight, s.Leads, s.Share, s.Low, s.High, offMark(s), v.After[s.Node])
	}
	tw.Flush()
	fmt.Fprintln(w)
	if len(v.Moves) == 0 {
		fmt.Fprintln(w, "nothing to move")
	} else {
		fmt.Fprintf(w, "would move %d bot(s) (dry run: nothing moved):\n", len(v.Moves))
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "BOT\tFROM\tTO\tSTEP BACK FIRST\tWHY")
		for _, m := range v.Moves {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Bot, m.From, m.To, dash(strings.Join(m.Ahead, ",")), m.Reason)
		}
		tw.Flush()
	}
	for _, n := range v.Notes {
		fmt.Fprintln(w, "note: "+n)
	}
}

// offMark says where a node out of its band is.
func offMark(s node.NodeSpread) string {
	switch {
	case s.Leads > s.High:
		return " above"
	case s.Leads < s.Low:
		return " below"
	}
	return ""
}
