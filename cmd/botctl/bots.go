package main

import (
	"context"
	"fmt"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/botctl/botctl/pkg/node"
	"github.com/spf13/cobra"
)

func newBotsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bots",
		Short: "Operate on bots: the registry in etcd (add, remove, list, rotate-secret), their settings at run time (set, show), env gate and balance",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErrorf("missing subcommand: see 'botctl bots --help'")
		},
	}
	cmd.AddCommand(newBotsGateCmd(), newBotsSetCmd(), newBotsShowCmd(), newBotsAddCmd(), newBotsRemoveCmd(), newBotsListCmd(), newBotsRotateSecretCmd(), newBotsBalanceCmd())
	return cmd
}

func newBotsGateCmd() *cobra.Command {
	var (
		cf       clusterFlags
		bot, env string
	)
	cmd := &cobra.Command{
		Use:   "gate --bot ID --env NAME",
		Short: "Move a bot's env gate: only nodes of that env may connect it",
		Long: `Each bot's gate in etcd names the one environment whose nodes may hold its
WeCom connection (the first node to start claims it for its env). Moving the
gate makes the current leader close its connection and resign; a node of
the new env takes over.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if bot == "" || env == "" {
				return usageErrorf("--bot and --env are required")
			}
			return cf.onEtcd(cmd, func(ctx context.Context, cli *clientv3.Client) error {
				old, err := node.Gate(ctx, cli, prefix, bot)
				if err != nil {
					return err
				}
				if err := node.SetGate(ctx, cli, prefix, bot, env); err != nil {
					return usageError{err}
				}
				if old == "" {
					old = "(unclaimed)"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "bot %s: gate %s → %s\n", bot, old, env)
				return nil
			})
		},
	}
	cf.registerEtcd(cmd)
	cmd.Flags().StringVar(&bot, "bot", "", "bot id")
	cmd.Flags().StringVar(&env, "env", "", "environment allowed to connect the bot")
	return cmd
}
