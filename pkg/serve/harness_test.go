package serve

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// startEtcd starts a real single-member etcd on loopback; it is closed when
// the test ends (Close is safe to call again from the test).
func startEtcd(t *testing.T) *infra.Etcd {
	t.Helper()
	e := testenv.StartEtcd(t)
	return e
}

// startNATS starts a real NATS server with JetStream on loopback; it is
// closed when the test ends (Close is safe to call again from the test).
func startNATS(t *testing.T) *infra.NATS {
	t.Helper()
	ns, err := infra.StartNATS(infra.NATSConfig{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	return ns
}

// startSim starts a WeCom simulator with bot b1 (secret s1) and returns
// its ws:// URL.
func startSim(t *testing.T) string {
	t.Helper()
	_, addr := startSimServer(t)
	return "ws://" + addr + "/"
}

// startSimServer starts a WeCom simulator with bot b1 (secret s1) and
// returns it with its HOST:PORT (WebSocket and control API).
func startSimServer(t *testing.T) (*wecomsim.Server, string) {
	t.Helper()
	sim := wecomsim.New(wecomsim.Config{Logger: zerolog.Nop()})
	if err := sim.AddBot("b1", "s1"); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go sim.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sim.Shutdown(ctx)
	})
	return sim, ln.Addr().String()
}

// nodeConfig is node n1's configuration for bot b1 on the simulator at
// wecomURL, etcd e and the NATS at natsURL (credentials: the caller's).
func nodeConfig(t *testing.T, wecomURL string, e *infra.Etcd, natsURL string) config.Config {
	cfg := config.Defaults()
	cfg.NodeID, cfg.DataDir = "n1", filepath.Join(t.TempDir(), "n1")
	cfg.WeCom.URL = wecomURL
	cfg.Bots = []config.Bot{{ID: "b1", Secret: "s1"}}
	cfg.Election.TTL, cfg.Election.SafetyMargin = 3*time.Second, time.Second
	cfg.Etcd.Endpoints = e.Endpoints()
	cfg.NATS.URL = natsURL
	return cfg
}

// runningNode is a node started by startNode.
type runningNode struct {
	*Node
	API  string     // http://HOST:PORT of its API
	Done chan error // Run's result
	// Stop stops the node gracefully (as SIGTERM does) and returns Run's
	// result.
	Stop func() error
}

// startNode validates cfg, runs the node with the config's etcd client and
// NATS options (as botctl serve does) and returns once Run returned or
// the node is ready (JetStream bound). It is stopped when the test ends.
func startNode(t *testing.T, cfg config.Config) (*runningNode, error) {
	t.Helper()
	return startNodeLogged(t, cfg, zerolog.Nop())
}

// startNodeLogged is startNode with the node's log going to log.
func startNodeLogged(t *testing.T, cfg config.Config, log zerolog.Logger) (*runningNode, error) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cc, err := cfg.Etcd.ClientConfig(cfg.Etcd.Endpoints)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	natsOpts, err := cfg.NATS.Options()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *Node, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Config: cfg, Etcd: cli, NATSURL: cfg.NATS.URL, NATSOptions: natsOpts, Listener: ln,
			Logger: log, Ready: func(n *Node) { ready <- n }})
	}()
	rn := &runningNode{API: "http://" + ln.Addr().String(), Done: done}
	rn.Stop = func() error {
		cancel()
		select {
		case err := <-done:
			done <- err // for a later reader
			return err
		case <-time.After(60 * time.Second):
			t.Error("node did not stop within 60s")
			return nil
		}
	}
	t.Cleanup(func() {
		rn.Stop()
		cli.Close()
	})
	select {
	case rn.Node = <-ready:
		return rn, nil
	case err := <-done:
		done <- err
		return nil, err
	case <-time.After(90 * time.Second):
		t.Fatal("node neither ready nor stopped after 90s")
		return nil, nil
	}
}

// scrape reads the node's /metrics.
func (rn *runningNode) scrape(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(rn.API + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
