package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/redact"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// endpointFile records, in a data dir, the endpoint of the embedded etcd a
// `botctl serve` started there, so that `botctl status --data-dir DIR` finds it.
const endpointFile = "etcd.endpoint"

// etcdFlags are the flags of the commands that read or write cluster state.
// TLS and credentials (etcd.ca_file, cert_file, key_file, username,
// password_file) come from --config and BOTCTL_ETCD_* as for serve.
type etcdFlags struct {
	config    string
	endpoints string
	dataDir   string
	timeout   time.Duration
	api       config.API // of --config: how to reach the nodes' APIs
}

func (f *etcdFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.config, "config", "", "botctl's YAML config file: etcd endpoints, TLS and credentials (env BOTCTL_ETCD_* also applies)")
	cmd.Flags().StringVar(&f.endpoints, "etcd", "", "etcd endpoints, comma-separated (default etcd.endpoints of --config or $BOTCTL_ETCD_ENDPOINTS, else the embedded etcd of --data-dir)")
	cmd.Flags().StringVar(&f.dataDir, "data-dir", "data", "data dir of a 'botctl serve' running embedded etcd")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 5*time.Second, "how long to wait for etcd")
}

// resolve returns the etcd section to connect with: --etcd, else the
// endpoints of --config or $BOTCTL_ETCD_ENDPOINTS, else the embedded etcd
// recorded in --data-dir; TLS and credentials from --config and the
// environment.
func (f *etcdFlags) resolve() (config.Etcd, error) {
	cfg, err := config.Load(f.config, os.Environ())
	if err != nil {
		return config.Etcd{}, usageError{err}
	}
	ec := cfg.Etcd
	ec.DialTimeout = f.timeout
	f.api = cfg.API
	s := f.endpoints
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
	if _, err := cli.Get(ctx, "/botctl/health-probe"); err != nil {
		cli.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s", ec.DialTimeout)
		}
		return nil, fmt.Errorf("cannot reach etcd at %s: %w (is it running? check --etcd, and etcd.ca_file/cert_file/key_file or etcd.username if it asks for TLS or a user)", eps, redact.Error(err))
	}
	return cli, nil
}
