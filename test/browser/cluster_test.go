package browser

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/botctl/botctl/pkg/serve"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const bot = "demo"

// cluster is what serve --demo runs, split so a node can stop: embedded
// etcd and NATS, the WeCom simulator on a real listener, and nodes in
// this process (serve.Run, as the binary runs it).
type cluster struct {
	t     *testing.T
	etcd  *infra.Etcd
	nats  *infra.NATS
	cli   *clientv3.Client // the test's own, to read who leads
	wsURL string
	dir   string
	// answerTime is how long the demo backend streams an answer.
	answerTime time.Duration
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	dir := t.TempDir()
	e, _, err := infra.StartEtcdOnFreePorts(context.Background(), infra.EtcdConfig{DataDir: filepath.Join(dir, "etcd"), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	n, err := infra.StartNATS(infra.NATSConfig{DataDir: filepath.Join(dir, "nats"), Addr: "127.0.0.1:0", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	sim := wecomsim.New(wecomsim.Config{Logger: zerolog.Nop()})
	if err := sim.AddBot(bot, bot+"-secret"); err != nil {
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
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &cluster{t: t, etcd: e, nats: n, cli: cli, wsURL: "ws://" + ln.Addr().String() + "/", dir: dir, answerTime: 3 * time.Second}
}

type runningNode struct {
	id    string
	api   string // base URL of the node API
	token string // its API token (generated in its data dir)
	stop  func()
}

// start runs node id until stop (or the test's end) and returns once it is
// ready (JetStream bound).
func (c *cluster) start(id string) *runningNode {
	c.t.Helper()
	cfg := config.Defaults()
	cfg.NodeID, cfg.DataDir = id, filepath.Join(c.dir, id)
	cfg.WeCom.URL = c.wsURL
	cfg.Bots = []config.Bot{{ID: bot, Secret: bot + "-secret"}}
	// A short election (a leader that stops is replaced in about a
	// second) and a short answer, streamed in a few frames.
	cfg.Election.TTL, cfg.Election.SafetyMargin = 3*time.Second, time.Second
	cfg.AI.Demo.AnswerTime = c.answerTime
	if err := cfg.Validate(); err != nil {
		c.t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- serve.Run(ctx, serve.Options{Config: cfg, Etcd: cli, NATSURL: c.nats.ClientURL(), Listener: ln, Logger: logger(),
			Ready: func(*serve.Node) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		c.t.Fatalf("node %s stopped before it was ready: %v", id, err)
	case <-time.After(wait):
		c.t.Fatalf("node %s not ready after %s", id, wait)
	}
	token, err := cfg.API.CallerToken(cfg.DataDir)
	if err != nil {
		c.t.Fatal(err)
	}
	var once sync.Once
	n := &runningNode{id: id, api: "http://" + ln.Addr().String(), token: token, stop: func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					c.t.Errorf("node %s: %v", id, err)
				}
			case <-time.After(wait):
				c.t.Errorf("node %s did not stop within %s", id, wait)
			}
			cli.Close()
		})
	}}
	c.t.Cleanup(n.stop)
	return n
}

// leader waits until someone leads the bot and returns who.
func (c *cluster) leader() string {
	c.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := election.Leader(ctx, c.cli, "", bot)
		cancel()
		if err == nil {
			return info.Node
		}
		if !errors.Is(err, election.ErrNoLeader) || time.Now().After(deadline) {
			c.t.Fatalf("leader of %s: %v", bot, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logger: BOTCTL_TEST_LOG=1 shows the nodes' logs.
func logger() zerolog.Logger {
	if os.Getenv("BOTCTL_TEST_LOG") != "" {
		return zerolog.New(os.Stderr).With().Timestamp().Logger()
	}
	return zerolog.Nop()
}
