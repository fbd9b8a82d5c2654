package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/spf13/cobra"
)

// newInfraCmd runs only the embedded etcd and NATS servers: shared state for
// several botctl nodes on one machine (demos, drills, end-to-end tests).
func newInfraCmd() *cobra.Command {
	var (
		dataDir, etcdListen, natsListen string
		natsSync                        string
		allowRemote                     bool
	)
	cmd := &cobra.Command{
		Use:   "infra",
		Short: "Run only the embedded etcd and NATS (JetStream) servers",
		Long: `Run a single-node etcd and a NATS server with JetStream, in --data-dir,
until SIGINT or SIGTERM. Point several 'botctl serve' nodes at them to try
failover on one machine. Prints one line to stdout when both accept clients:

  infra ready: etcd http://127.0.0.1:2379 nats nats://127.0.0.1:4222

This is not for production: it has no redundancy, no TLS and no
authentication. It listens on loopback only unless --allow-remote is given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dataDir == "" {
				return usageErrorf("--data-dir is required")
			}
			if err := checkListen(etcdListen, "127.0.0.1:2379", false); err != nil {
				return usageErrorf("--etcd-listen %q: %v", etcdListen, err)
			}
			if err := checkListen(natsListen, "127.0.0.1:4222", true); err != nil {
				return usageErrorf("--nats-listen %q: %v", natsListen, err)
			}
			for _, l := range []struct{ flag, addr string }{{"--etcd-listen", etcdListen}, {"--nats-listen", natsListen}} {
				if err := checkLoopback(l.addr, allowRemote); err != nil {
					return usageErrorf("%s %s: %v: the embedded etcd and NATS have no TLS and no authentication, so anyone who reaches them can read and change every task and take any bot's leadership. "+
						"Give --allow-remote to listen there anyway (a lab on a trusted network), or run etcd and NATS clusters with TLS (docs/security.md)", l.flag, l.addr, err)
				}
			}
			syncInterval, err := infra.ParseSync(natsSync)
			if err != nil {
				return usageErrorf("--nats-sync %q: %v", natsSync, err)
			}
			if etcdListen == natsListen {
				return usageErrorf("--etcd-listen and --nats-listen are both %q: give each its own port", etcdListen)
			}
			ctx := cmd.Context()
			log := logger.With().Str("component", "infra").Logger()

			etcd, err := infra.StartEtcd(ctx, infra.EtcdConfig{DataDir: dataDir, ClientAddr: etcdListen, Logger: logger})
			if err != nil {
				return err
			}
			defer etcd.Close()
			nats, err := infra.StartNATS(infra.NATSConfig{DataDir: dataDir, Addr: natsListen, SyncInterval: syncInterval, Logger: logger})
			if err != nil {
				return err
			}
			defer nats.Close()

			fmt.Fprintf(cmd.OutOrStdout(), "infra ready: etcd %s nats %s\n", etcd.Endpoints()[0], nats.ClientURL())
			log.Info().Str("data_dir", dataDir).Msg("infra running; stop with SIGTERM or SIGINT")
			select {
			case <-ctx.Done():
				log.Info().Msg("stopping infra")
				return nil
			case err := <-etcd.Err():
				if err == nil {
					err = errors.New("stopped unexpectedly")
				}
				return fmt.Errorf("embedded etcd failed: %w", err)
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "", "directory for etcd's and JetStream's data (created if missing)")
	f.StringVar(&etcdListen, "etcd-listen", "127.0.0.1:2379", "etcd client address host:port (fixed port)")
	f.StringVar(&natsListen, "nats-listen", "127.0.0.1:4222", "NATS client address host:port (port 0 picks a free one)")
	f.StringVar(&natsSync, "nats-sync", "always", `how often JetStream fsyncs: "always" (every write is on disk before it is acknowledged) or an interval such as 2m (nats-server's default; acknowledged writes since the last sync are lost in a power cut)`)
	f.BoolVar(&allowRemote, "allow-remote", false, "allow listening on a non-loopback address (no TLS, no authentication: trusted networks only)")
	return cmd
}

// checkListen accepts "host:port"; port 0 only if zeroOK.
func checkListen(addr, example string, zeroOK bool) error {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port, e.g. %s", example)
	}
	if host == "" {
		return errors.New("want an explicit host, e.g. 127.0.0.1")
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	if port == 0 && !zeroOK {
		return errors.New("want a fixed port: etcd cannot report a random one")
	}
	return nil
}

// checkLoopback refuses an address other machines can reach, unless
// allowRemote.
func checkLoopback(addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || allowRemote || config.LoopbackHost(host) {
		return nil // a malformed address is reported by checkListen
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		return errors.New("every interface, not only loopback")
	}
	return errors.New("not a loopback address")
}
