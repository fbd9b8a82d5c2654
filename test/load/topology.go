package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/infra"
	proc "github.com/botctl/botctl/test/e2e/cluster"
	"github.com/rs/zerolog"
)

// topology is the ramp's deployment, every part a process of its own so
// that its CPU and RSS can be read from /proc: one etcd and one NATS
// server (children of this binary, "etcd" and "nats" commands, started
// with pkg/infra exactly as `botctl infra` starts them, but apart so that
// their CPU is told apart), `botctl sim --record`, and `botctl serve`
// nodes with the default configuration, pointed at them.
type topology struct {
	dir    string
	etcd   *proc.Proc
	nats   *proc.Proc
	c      *proc.Cluster // the simulator and the nodes
	leader string        // node id leading the bot
}

const rampBot = "b1"

var (
	etcdReadyRE = regexp.MustCompile(`etcd ready: (\S+)`)
	natsReadyRE = regexp.MustCompile(`nats ready: (\S+)`)
)

// startInfra starts the etcd and NATS children (self etcd, self nats)
// under dir.
func startInfra(self, dir string) (etcd, nats *proc.Proc, etcdURL, natsURL string, err error) {
	addr, err := infra.FreeAddr()
	if err != nil {
		return nil, nil, "", "", err
	}
	etcd, err = proc.StartProc("etcd", self, []string{"etcd", "-dir", filepath.Join(dir, "etcd"), "-client", addr}, proc.StartOptions{})
	if err != nil {
		return nil, nil, "", "", err
	}
	nats, err = proc.StartProc("nats", self, []string{"nats", "-dir", filepath.Join(dir, "nats")}, proc.StartOptions{})
	if err != nil {
		etcd.Kill()
		return nil, nil, "", "", err
	}
	l, err := etcd.WaitStdout("etcd ready", time.Minute)
	if err != nil {
		return etcd, nats, "", "", err
	}
	etcdURL = etcdReadyRE.FindStringSubmatch(l.Text)[1]
	l, err = nats.WaitStdout("nats ready", time.Minute)
	if err != nil {
		return etcd, nats, "", "", err
	}
	natsURL = natsReadyRE.FindStringSubmatch(l.Text)[1]
	return etcd, nats, etcdURL, natsURL, nil
}

// startTopology starts infra, the simulator and nodes botctl nodes with
// the demo backend answering in answer (self is this program, for
// the etcd and NATS children); it waits until one node leads the
// bot and the simulator sees it connected.
func startTopology(bin, self, dir string, nodes int, answer time.Duration) (*topology, error) {
	t := &topology{dir: dir}
	var etcdURL, natsURL string
	var err error
	t.etcd, t.nats, etcdURL, natsURL, err = startInfra(self, dir)
	if err != nil {
		return t, fmt.Errorf("infra: %w", err)
	}
	def := config.Defaults().Election
	t.c, err = proc.Start(proc.Options{
		Bin: bin, Dir: dir, Bots: []string{rampBot},
		// The production election settings (the cluster package's own
		// defaults are short, for tests).
		TTL: def.TTL, Margin: def.SafetyMargin,
		SimArgs:      []string{"--record"},
		NodeArgs:     []string{"--ai", "demo", "--demo-answer-time", answer.String()},
		StartTimeout: 90 * time.Second,
		External:     &proc.External{EtcdURLs: []string{etcdURL}, NATSURL: natsURL},
	})
	if err != nil {
		return t, fmt.Errorf("simulator: %w", err)
	}
	// The WeCom URL without its trailing slash: the same endpoint, but the
	// cluster package then adds no --backfill-history-url (off by default).
	wecom := strings.TrimSuffix(t.c.SimWS, "/")
	var wg sync.WaitGroup
	errs := make([]error, nodes)
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = t.c.StartNodeWith(fmt.Sprintf("n%d", i+1), proc.NodeOptions{WeComURL: wecom})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return t, err
		}
	}
	leaders, err := t.c.WaitStable(2 * time.Minute)
	if err != nil {
		return t, err
	}
	t.leader = leaders[rampBot]
	return t, nil
}

// procs are the topology's processes by role name (leader, worker-n2, …).
func (t *topology) procs() map[string]int {
	out := map[string]int{"etcd": t.etcd.Pid(), "nats": t.nats.Pid(), "sim": t.c.Sim.Pid()}
	for _, n := range t.c.Nodes() {
		role := "worker " + n.ID
		if n.ID == t.leader {
			role = "leader " + n.ID
		}
		out[role] = n.Proc.Pid()
	}
	return out
}

func (t *topology) close() {
	if t.c != nil {
		// Nodes first, with SIGTERM (they resign and flush), then the rest.
		for _, n := range t.c.Nodes() {
			n.Proc.Signal(syscall.SIGTERM)
		}
		for _, n := range t.c.Nodes() {
			if _, err := n.Proc.Wait(20 * time.Second); err != nil {
				n.Proc.Kill()
			}
		}
		t.c.Close()
	}
	for _, p := range []*proc.Proc{t.nats, t.etcd} {
		if p != nil {
			p.Signal(syscall.SIGTERM)
			if _, err := p.Wait(20 * time.Second); err != nil {
				p.Kill()
			}
		}
	}
}

// etcdMain is a child: one single-node etcd (pkg/infra, as `botctl infra`
// runs it) until SIGTERM.
func etcdMain(args []string) error {
	fs := flag.NewFlagSet("etcd", flag.ExitOnError)
	dir := fs.String("dir", "", "data dir")
	client := fs.String("client", "", "client host:port")
	fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	e, err := infra.StartEtcd(ctx, infra.EtcdConfig{DataDir: *dir, ClientAddr: *client, Logger: zerolog.New(os.Stderr).Level(zerolog.WarnLevel)})
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Printf("etcd ready: %s\n", strings.Join(e.Endpoints(), ","))
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return err
	}
}

// natsMain is a child: one NATS server with JetStream (pkg/infra, as
// `botctl infra` runs it) until SIGTERM.
func natsMain(args []string) error {
	fs := flag.NewFlagSet("nats", flag.ExitOnError)
	dir := fs.String("dir", "", "data dir")
	fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	n, err := infra.StartNATS(infra.NATSConfig{DataDir: *dir, Addr: "127.0.0.1:0", Logger: zerolog.New(os.Stderr).Level(zerolog.WarnLevel)})
	if err != nil {
		return err
	}
	defer n.Close()
	fmt.Printf("nats ready: %s\n", n.ClientURL())
	<-ctx.Done()
	return nil
}
