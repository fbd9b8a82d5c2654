package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/botctl/botctl/pkg/serve"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const bot = "b1"

// cluster is embedded etcd + embedded NATS + the WeCom simulator (recording
// on), all in this process; nodes run in-process (serve.Run) or as child
// processes of this binary (subcommand "node").
type cluster struct {
	dir   string
	etcd  *infra.Etcd
	nats  *infra.NATS
	sim   *wecomsim.Server
	simLn net.Listener
	wsURL string
	nodes []*node
}

type node struct {
	id   string
	srv  *serve.Node // in-process only
	stop func()
	cmd  *exec.Cmd // child only
}

func newCluster() (*cluster, error) {
	dir, err := os.MkdirTemp("", "botctl-load-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir}
	c.etcd, _, err = infra.StartEtcdOnFreePorts(context.Background(), infra.EtcdConfig{DataDir: filepath.Join(dir, "etcd"), Logger: zerolog.Nop()})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	c.nats, err = infra.StartNATS(infra.NATSConfig{DataDir: filepath.Join(dir, "nats"), Addr: "127.0.0.1:0", Logger: zerolog.Nop()})
	if err != nil {
		c.etcd.Close()
		return nil, fmt.Errorf("nats: %w", err)
	}
	c.sim = wecomsim.New(wecomsim.Config{Logger: zerolog.Nop(), Record: true})
	c.sim.AddBot(bot, "s1")
	c.simLn, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go c.sim.Serve(c.simLn)
	c.wsURL = "ws://" + c.simLn.Addr().String() + "/"
	return c, nil
}

func (c *cluster) close() {
	for i := len(c.nodes) - 1; i >= 0; i-- {
		c.nodes[i].stop()
	}
	c.sim.Close()
	c.nats.Close()
	c.etcd.Close()
	os.RemoveAll(c.dir)
}

// nodeParams are what a node differs in.
type nodeParams struct {
	ID          string
	Slots       int
	LeaderSlots int
	AnswerTime  time.Duration
	AnswerBytes int
}

func nodeConfig(p nodeParams, dataDir, wsURL string) (config.Config, error) {
	cfg := config.Defaults()
	cfg.NodeID, cfg.DataDir = p.ID, dataDir
	cfg.WeCom.URL = wsURL
	cfg.Bots = []config.Bot{{ID: bot, Secret: "s1"}}
	cfg.AI.Demo.AnswerTime = p.AnswerTime
	cfg.AI.Demo.AnswerBytes = p.AnswerBytes
	if p.Slots > 0 {
		cfg.Worker.Slots = p.Slots
	}
	if p.LeaderSlots > 0 {
		cfg.Worker.LeaderSlots = p.LeaderSlots
	}
	return cfg, cfg.Validate()
}

// runNode runs serve.Run until ctx ends; ready gets the node once running.
func runNode(ctx context.Context, cfg config.Config, endpoints []string, natsURL string, ready func(*serve.Node)) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	return serve.Run(ctx, serve.Options{Config: cfg, Etcd: cli, NATSURL: natsURL, Listener: ln, Logger: zerolog.Nop(), Ready: ready})
}

// startNode runs a node in this process.
func (c *cluster) startNode(p nodeParams) (*node, error) {
	cfg, err := nodeConfig(p, filepath.Join(c.dir, p.ID), c.wsURL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *serve.Node, 1)
	done := make(chan error, 1)
	go func() {
		done <- runNode(ctx, cfg, c.etcd.Endpoints(), c.nats.ClientURL(), func(n *serve.Node) { ready <- n })
	}()
	n := &node{id: p.ID}
	select {
	case n.srv = <-ready:
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("node %s: %w", p.ID, err)
	case <-time.After(60 * time.Second):
		cancel()
		return nil, fmt.Errorf("node %s not ready", p.ID)
	}
	n.stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	}
	c.nodes = append(c.nodes, n)
	return n, nil
}

// startChild runs a node as a child process (this binary, "node" command).
func (c *cluster) startChild(p nodeParams) (*node, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "node",
		"-id", p.ID, "-dir", filepath.Join(c.dir, p.ID), "-wecom", c.wsURL,
		"-etcd", strings.Join(c.etcd.Endpoints(), ","), "-nats", c.nats.ClientURL(),
		"-slots", strconv.Itoa(p.Slots), "-leader-slots", strconv.Itoa(p.LeaderSlots),
		"-answer-time", p.AnswerTime.String(), "-answer-bytes", strconv.Itoa(p.AnswerBytes))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// The child prints "ready" once serve.Run called Ready.
	readyc := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		n, err := out.Read(buf)
		if err != nil || !strings.Contains(string(buf[:n]), "ready") {
			readyc <- fmt.Errorf("child %s did not start: %v %q", p.ID, err, buf[:n])
			return
		}
		readyc <- nil
	}()
	select {
	case err := <-readyc:
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, err
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("child %s not ready", p.ID)
	}
	n := &node{id: p.ID, cmd: cmd}
	var stopped bool
	n.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	c.nodes = append(c.nodes, n)
	return n, nil
}

// childUsage is a stopped child's CPU time and peak RSS.
func (n *node) childUsage() (cpu time.Duration, maxRSSKB int64) {
	if n.cmd == nil || n.cmd.ProcessState == nil {
		return 0, 0
	}
	ru, ok := n.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Maxrss
}

// waitLeader waits until the simulator sees the bot connected.
func (c *cluster) waitLeader() error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if s, _ := c.sim.Stats(bot); s.Connected {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("no leader connected to the simulator")
}
