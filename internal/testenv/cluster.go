package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/nats-io/nats-server/v2/server"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// StartNATSCluster starts n clustered JetStream servers in this process
// and returns their client URLs. They are shut down when the test ends.
// The meta group elects its leader after they are up: a first declare may
// need retrying.
func StartNATSCluster(t testing.TB, n int) []string {
	t.Helper()
	c := NewNATSCluster(t, n)
	for i := range n {
		c.Start(t, i)
	}
	return c.URLs()
}

// NATSCluster is a cluster of n JetStream servers in this process, each
// configured with every other's route, started one by one with Start: a
// test can run a cluster with a server not (yet) up, and stop one (Stop)
// and start it again on its ports and store.
type NATSCluster struct {
	cports  []int
	ports   []int            // client ports, fixed so URLs are known before Start
	dirs    []string         // store dirs, fixed at a server's first Start
	servers []*server.Server // the running ones (nil: not started, or stopped)
	// SyncAlways, set before Start, has JetStream fsync every write, as
	// botctl's servers do (infra.NATSConfig.SyncInterval): a write is in
	// flight longer, as in production.
	SyncAlways bool
	// MaxStore, set before Start, is each server's JetStream file storage
	// (max_file_store) in bytes; 0: nats-server's default.
	MaxStore int64
}

// NewNATSCluster picks the ports of an n-server cluster; no server runs
// until Start.
func NewNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	c := &NATSCluster{dirs: make([]string, n), servers: make([]*server.Server, n)}
	ports, err := infra.FreePorts(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range ports {
		if len(c.cports) < n {
			c.cports = append(c.cports, port)
		} else {
			c.ports = append(c.ports, port)
		}
	}
	return c
}

// URLs are the client URLs of every server, started or not.
func (c *NATSCluster) URLs() []string {
	var urls []string
	for _, p := range c.ports {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	return urls
}

// Start starts server i (from 0) and waits until it accepts clients; it is
// shut down when the test ends. Started again after Stop, it has the
// store it had: what its file streams held, and its cluster state.
func (c *NATSCluster) Start(t testing.TB, i int) {
	t.Helper()
	if c.servers[i] != nil {
		t.Fatalf("nats server %d is running", i+1)
	}
	if c.dirs[i] == "" {
		c.dirs[i] = t.TempDir()
	}
	var routes []string
	for j, p := range c.cports {
		if j != i {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
		}
	}
	s, err := server.NewServer(&server.Options{
		ServerName: fmt.Sprintf("s%d", i+1), Host: "127.0.0.1", Port: c.ports[i], NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: c.dirs[i], SyncAlways: c.SyncAlways, JetStreamMaxStore: c.MaxStore,
		Cluster: server.ClusterOpts{Name: "test-cluster", Host: "127.0.0.1", Port: c.cports[i]},
		Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	c.servers[i] = s
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatalf("nats server %d not ready", i+1)
	}
}

// Stop shuts server i down (as a clean stop of its process does) and
// waits until it is down; Start brings it back.
func (c *NATSCluster) Stop(t testing.TB, i int) {
	t.Helper()
	s := c.servers[i]
	if s == nil {
		t.Fatalf("nats server %d is not running", i+1)
	}
	s.Shutdown()
	s.WaitForShutdown()
	c.servers[i] = nil
}

// DeclareOnCluster connects to the first of urls and declares botctl's
// store there with opts, retrying until the cluster's meta group has a
// leader (a minute at most). The connection is closed when the test ends.
func DeclareOnCluster(t testing.TB, urls []string, opts jetstream.Options) (*jetstream.Store, natsjs.JetStream) {
	t.Helper()
	_, js := Connect(t, urls[0])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := jetstream.Declare(actx, js, opts)
		acancel()
		if err == nil {
			return st, js
		}
		if ctx.Err() != nil {
			t.Fatalf("declare on the cluster: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
