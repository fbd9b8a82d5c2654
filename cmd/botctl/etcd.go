package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// endpointFile records, in a data dir, the endpoint of the embedded etcd a
// `botctl serve` started there, so that `botctl status --data-dir DIR` finds it.
const endpointFile = "etcd.endpoint"

// etcdFlags are the flags of the commands that read or write cluster state.
type etcdFlags struct {
	endpoints string
	dataDir   string
	timeout   time.Duration
}

func (f *etcdFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.endpoints, "etcd", "", "etcd endpoints, comma-separated (default $BOTCTL_ETCD_ENDPOINTS, else the embedded etcd of --data-dir)")
	cmd.Flags().StringVar(&f.dataDir, "data-dir", "data", "data dir of a 'botctl serve' running embedded etcd")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 5*time.Second, "how long to wait for etcd")
}

// resolve returns the endpoints: --etcd, else $BOTCTL_ETCD_ENDPOINTS, else
// the embedded etcd recorded in --data-dir.
func (f *etcdFlags) resolve() ([]string, error) {
	s := f.endpoints
	if s == "" {
		s = os.Getenv("BOTCTL_ETCD_ENDPOINTS")
	}
	if s == "" {
		raw, err := os.ReadFile(filepath.Join(f.dataDir, endpointFile))
		if err != nil {
			return nil, usageErrorf("no etcd to ask: give --etcd http://HOST:PORT, or --data-dir of a running 'botctl serve' with embedded etcd (%s not found)",
				filepath.Join(f.dataDir, endpointFile))
		}
		s = strings.TrimSpace(string(raw))
	}
	var eps []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return nil, usageErrorf("--etcd is empty")
	}
	return eps, nil
}

func newEtcdClient(endpoints []string, timeout time.Duration) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: timeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	// clientv3.New does not wait for a connection: prove there is one, so
	// the operator gets "cannot reach etcd" and not a later timeout.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := cli.Get(ctx, "health-probe"); err != nil {
		cli.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s", timeout)
		}
		return nil, fmt.Errorf("cannot reach etcd at %s: %w (is it running? check --etcd)", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}
