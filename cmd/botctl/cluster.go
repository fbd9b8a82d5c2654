package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/redact"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A `botctl serve` with embedded etcd and NATS records in its data dir
// where they listen, so that `botctl status --data-dir DIR` (and tasks,
// incidents, bots, drill) find them.
const (
	endpointFile = "etcd.endpoint"
	natsURLFile  = "nats.url"
)

// clusterFlags say where a command finds the cluster's state: etcd (nodes,
// elections, gates) and NATS (tasks, health, incidents). An endpoint comes
// from its flag, else from --config or the environment (BOTCTL_ETCD_*,
// BOTCTL_NATS_*, as for serve), else from --data-dir's embedded etcd or
// NATS. TLS, credentials and the NATS prefix come from --config and the
// environment.
type clusterFlags struct {
	config     string
	etcd       string // --etcd: endpoints, comma-separated
	nats       string // --nats: URL
	natsPrefix string // --nats-prefix
	dataDir    string
	timeout    time.Duration
	api        config.API // of --config, once etcdConfig ran: how to reach the nodes' APIs
	cfgDataDir string     // data_dir of --config and the environment, once etcdConfig ran
}

// tokenDir is the data dir whose generated API token (config.
// GeneratedTokenFile) a command sends when api.token_file is unset:
// --data-dir when given, else data_dir of --config or the environment.
func (f *clusterFlags) tokenDir(cmd *cobra.Command) string {
	if cmd.Flags().Changed("data-dir") || f.cfgDataDir == "" {
		return f.dataDir
	}
	return f.cfgDataDir
}

// registerEtcd registers the flags of a command that reads or writes etcd
// (status, bots): --config, --etcd, --data-dir and --timeout (5s).
func (f *clusterFlags) registerEtcd(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.config, "config", "", "botctl's YAML config file: etcd endpoints, TLS and credentials (env BOTCTL_ETCD_* also applies)")
	cmd.Flags().StringVar(&f.etcd, "etcd", "", "etcd endpoints, comma-separated (default etcd.endpoints of --config or $BOTCTL_ETCD_ENDPOINTS, else the embedded etcd of --data-dir)")
	cmd.Flags().StringVar(&f.dataDir, "data-dir", "data", "data dir of a 'botctl serve' running embedded etcd")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 5*time.Second, "how long to wait for etcd")
}

// registerNATS registers the flags of a command that reads or changes
// tasks and incidents (tasks, incidents, drill), for it and its
// subcommands: --config, --nats, --nats-prefix, --data-dir and --timeout
// (10s).
func (f *clusterFlags) registerNATS(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.config, "config", "", "botctl's YAML config file: NATS URL, prefix, TLS and credentials (env BOTCTL_NATS_* also applies)")
	cmd.PersistentFlags().StringVar(&f.nats, "nats", "", "NATS URL (default nats.url of --config or $BOTCTL_NATS_URL, else the embedded NATS of --data-dir)")
	cmd.PersistentFlags().StringVar(&f.natsPrefix, "nats-prefix", "", "stream and bucket prefix of the environment to act on (default nats.prefix of --config or $BOTCTL_NATS_PREFIX, else BOTCTL)")
	cmd.PersistentFlags().StringVar(&f.dataDir, "data-dir", "data", "data dir of a 'botctl serve' running embedded NATS")
	cmd.PersistentFlags().DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to wait for NATS")
}

// etcdConfig returns the etcd section to connect with: --etcd, else the
// endpoints of --config or $BOTCTL_ETCD_ENDPOINTS, else the embedded etcd
// recorded in --data-dir; TLS and credentials from --config and the
// environment.
func (f *clusterFlags) etcdConfig() (config.Etcd, error) {
	cfg, err := config.Load(f.config, os.Environ())
	if err != nil {
		return config.Etcd{}, usageError{err}
	}
	ec := cfg.Etcd
	ec.DialTimeout = f.timeout
	f.api, f.cfgDataDir = cfg.API, cfg.DataDir
	s := f.etcd
	if s == "" && len(ec.Endpoints) > 0 {
		return ec, nil
	}
	if s == "" {
		raw, err := os.ReadFile(filepath.Join(f.dataDir, endpointFile))
		if err != nil {
			return ec, usageErrorf("no etcd to ask: give --etcd http://HOST:PORT (or --config), or --data-dir of a running 'botctl serve' with embedded etcd (%s not found)",
				filepath.Join(f.dataDir, endpointFile))
		}
		s = strings.TrimSpace(string(raw))
	}
	ec.Endpoints = nil
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			ec.Endpoints = append(ec.Endpoints, e)
		}
	}
	if len(ec.Endpoints) == 0 {
		return ec, usageErrorf("--etcd is empty")
	}
	return ec, nil
}

// etcdClient connects to the etcd of etcdConfig; the caller closes it.
func (f *clusterFlags) etcdClient() (*clientv3.Client, error) {
	ec, err := f.etcdConfig()
	if err != nil {
		return nil, err
	}
	return newEtcdClient(ec)
}

// newEtcdClient connects to ec.Endpoints with ec's TLS and credentials and
// proves the connection within ec.DialTimeout.
func newEtcdClient(ec config.Etcd) (*clientv3.Client, error) {
	eps := strings.Join(redact.URLs(ec.Endpoints), ",")
	cc, err := ec.ClientConfig(ec.Endpoints)
	if err != nil {
		return nil, usageError{err}
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", eps, redact.Error(err))
	}
	// clientv3.New does not wait for a connection: prove there is one, so
	// the operator gets "cannot reach etcd" and not a later timeout.
	ctx, cancel := context.WithTimeout(context.Background(), ec.DialTimeout)
	defer cancel()
	// Under /botctl/: an etcd RBAC role limited to it may read it.
	if _, err := cli.Get(ctx, etcdkeys.Default.HealthProbe()); err != nil {
		cli.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s", ec.DialTimeout)
		}
		return nil, fmt.Errorf("cannot reach etcd at %s: %w (is it running? check --etcd, and etcd.ca_file/cert_file/key_file or etcd.username if it asks for TLS or a user)", eps, redact.Error(err))
	}
	return cli, nil
}

// natsConfig returns the nats section to connect with (see
// clusterConfig).
func (f *clusterFlags) natsConfig() (config.NATS, error) {
	cfg, err := f.clusterConfig()
	return cfg.NATS, err
}

// clusterConfig returns the configuration of --config, its nats section
// the one to connect with: --nats, else nats.url of --config or
// $BOTCTL_NATS_URL, else the embedded NATS recorded in --data-dir;
// --nats-prefix over nats.prefix.
func (f *clusterFlags) clusterConfig() (config.Config, error) {
	cfg, err := config.Load(f.config, os.Environ())
	if err != nil {
		return cfg, usageError{err}
	}
	n := &cfg.NATS
	if f.natsPrefix != "" {
		n.Prefix = f.natsPrefix
	}
	if f.nats != "" {
		n.URL = f.nats
	}
	if n.URL == "" {
		raw, err := os.ReadFile(filepath.Join(f.dataDir, natsURLFile))
		if err != nil {
			return cfg, usageErrorf("no NATS to ask: give --nats nats://HOST:PORT (or --config), or --data-dir of a running 'botctl serve' with embedded NATS")
		}
		n.URL = strings.TrimSpace(string(raw))
	}
	return cfg, nil
}

// jetStream connects to the NATS of natsConfig; the caller closes the
// connection.
func (f *clusterFlags) jetStream() (natsjs.JetStream, config.NATS, error) {
	n, err := f.natsConfig()
	if err != nil {
		return nil, n, err
	}
	js, err := f.connect(n)
	return js, n, err
}

// connect connects to the NATS of n; the caller closes the connection.
func (f *clusterFlags) connect(n config.NATS) (natsjs.JetStream, error) {
	opts, err := n.Options()
	if err != nil {
		return nil, usageError{err}
	}
	u := redact.URL(n.URL)
	nc, err := nats.Connect(n.URL, append(opts, nats.Timeout(f.timeout), nats.Name("botctl tasks"))...)
	if refused := n.RefusedError(err); refused != nil {
		return nil, fmt.Errorf("NATS at %s: %w", u, redact.Error(refused))
	}
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS at %s: %w (is it running? check --nats, and nats.ca_file/cert_file/key_file or the nats credentials if it asks for TLS or a user)", u, redact.Error(err))
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return js, nil
}

// store connects to the NATS of clusterConfig and opens the declared
// streams and buckets of the prefix; the caller calls the returned close.
func (f *clusterFlags) store() (*jetstream.Store, func(), error) {
	cfg, err := f.clusterConfig()
	if err != nil {
		return nil, nil, err
	}
	js, err := f.connect(cfg.NATS)
	if err != nil {
		return nil, nil, err
	}
	nc := js.Conn()
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	// Declare creates what is missing, as a node of this config would, and
	// changes no deployed replicas or limits (the media store's bound and
	// the reservation among them): a deployment that exists keeps its own,
	// whatever this command's config says.
	s, err := jetstream.Declare(ctx, js, cfg.DataPlane())
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("open task streams and buckets (prefix %s): %w", cfg.NATS.Prefix, err)
	}
	return s, nc.Close, nil
}

// onEtcd runs fn with a client of the etcd of etcdClient and a context of
// --timeout, and closes the client: the preamble of a command that reads
// or writes etcd once.
func (f *clusterFlags) onEtcd(cmd *cobra.Command, fn func(ctx context.Context, cli *clientv3.Client) error) error {
	cli, err := f.etcdClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	return fn(ctx, cli)
}
