package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/infra"
	proc "github.com/botctl/botctl/test/e2e/cluster"
	"github.com/botctl/botctl/test/infracluster"
	"github.com/rs/zerolog"
)

// topology is the etcd and NATS a ramp's nodes run on (-topology).
type topology string

const (
	// topologySingle is one etcd member and one NATS server, the nodes at
	// the default nats.replicas (1): what `botctl infra` runs, and what
	// bench/ramp.md measured.
	topologySingle topology = "single"
	// topologyR3 is production's (issue 12): 3 etcd members and 3 NATS
	// servers clustered with JetStream, the nodes at --nats-replicas 3,
	// every node given every member's URL.
	topologyR3 topology = "r3"
)

func parseTopology(s string) (topology, error) {
	switch t := topology(s); t {
	case topologySingle, topologyR3:
		return t, nil
	}
	return "", fmt.Errorf("-topology %q: want single or r3", s)
}

// members is the number of etcd members, and of NATS servers.
func (t topology) members() int {
	if t == topologyR3 {
		return 3
	}
	return 1
}

// replicas is the nodes' nats.replicas.
func (t topology) replicas() int {
	if t == topologyR3 {
		return 3
	}
	return config.Defaults().NATS.Replicas
}

// nodeArgs are the `botctl serve` flags the topology needs beyond the
// default configuration.
func (t topology) nodeArgs() []string {
	if t == topologyR3 {
		return []string{"--nats-replicas", strconv.Itoa(t.replicas())}
	}
	return nil
}

// describe is the topology in a few words, for the report.
func (t topology) describe() string {
	if t == topologyR3 {
		return fmt.Sprintf("r3: %d etcd members, %d NATS servers, JetStream replicas %d (the production topology)", t.members(), t.members(), t.replicas())
	}
	return fmt.Sprintf("single: 1 etcd member, 1 NATS server, JetStream replicas %d", t.replicas())
}

// deployment is one step's running system, every part a process of its
// own so that its CPU and RSS can be read from /proc: etcd and NATS (see
// topology), `botctl sim --record`, and `botctl serve` nodes with the
// default configuration, pointed at them.
//
// On the single topology etcd and NATS are children of this binary
// ("etcd" and "nats" commands, started with pkg/infra exactly as `botctl
// infra` starts them, but apart so that their CPU is told apart). On r3
// they are test/infracluster's infranode processes, etcd with fsync on as
// in production.
type deployment struct {
	dir    string
	etcd   *proc.Proc          // single
	nats   *proc.Proc          // single
	infra  *infracluster.Infra // r3
	c      *proc.Cluster       // the simulator and the nodes
	leader string              // node id leading the bot
}

const rampBot = "b1"

var (
	etcdReadyRE = regexp.MustCompile(`etcd ready: (\S+)`)
	natsReadyRE = regexp.MustCompile(`nats ready: (\S+)`)
)

// startSingle starts the etcd and NATS children (self etcd, self nats)
// under dir.
func startSingle(self, dir, natsSync string) (etcd, nats *proc.Proc, etcdURL, natsURL string, err error) {
	addr, err := infra.FreeAddr()
	if err != nil {
		return nil, nil, "", "", err
	}
	etcd, err = proc.StartProc("etcd", self, []string{"etcd", "-dir", filepath.Join(dir, "etcd"), "-client", addr, "-pprof"}, proc.StartOptions{})
	if err != nil {
		return nil, nil, "", "", err
	}
	nats, err = proc.StartProc("nats", self, []string{"nats", "-dir", filepath.Join(dir, "nats"), "-sync", natsSync, "-pprof"}, proc.StartOptions{})
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

// startInfra starts o.topology's etcd and NATS under dir and returns the
// URLs every node is given: each etcd member's, and each NATS server's
// comma-separated.
func (d *deployment) startInfra(o rampOpts) (etcdURLs []string, natsURL string, err error) {
	if o.topology == topologyR3 {
		d.infra, err = infracluster.Start(infracluster.Options{Bin: o.infranode, Dir: filepath.Join(d.dir, "infra"),
			Size: o.topology.members(), EtcdFsync: true, NATSSync: o.natsSync, Pprof: true})
		if err != nil {
			return nil, "", err
		}
		return d.infra.EtcdURLs(), d.infra.NATSURLs(), nil
	}
	var etcdURL string
	d.etcd, d.nats, etcdURL, natsURL, err = startSingle(o.self, d.dir, o.natsSync)
	return []string{etcdURL}, natsURL, err
}

// startDeployment starts o.topology's etcd and NATS, the simulator and
// nodes botctl nodes with the demo backend answering in answer; it waits
// until one node leads the bot and the simulator sees it connected.
func startDeployment(bin, dir string, o rampOpts, nodes int, answer time.Duration) (*deployment, error) {
	d := &deployment{dir: dir}
	etcdURLs, natsURL, err := d.startInfra(o)
	if err != nil {
		return d, fmt.Errorf("infra (%s): %w", o.topology, err)
	}
	def := config.Defaults().Election
	// --api-pprof on every node: the profiles of "+" steps (pprof.go); the
	// handlers cost nothing until one is asked for.
	d.c, err = proc.Start(proc.Options{
		Bin: bin, Dir: dir, Bots: []string{rampBot},
		// The production election settings (the cluster package's own
		// defaults are short, for tests).
		TTL: def.TTL, Margin: def.SafetyMargin,
		SimArgs:      []string{"--record"},
		NodeArgs:     append([]string{"--ai", "demo", "--demo-answer-time", answer.String(), "--api-pprof", "true"}, append(o.topology.nodeArgs(), o.nodeArgs...)...),
		StartTimeout: 90 * time.Second,
		External:     &proc.External{EtcdURLs: etcdURLs, NATSURL: natsURL},
	})
	if err != nil {
		return d, fmt.Errorf("simulator: %w", err)
	}
	// The WeCom URL without its trailing slash: the same endpoint, but the
	// cluster package then adds no --backfill-history-url (off by default).
	wecom := strings.TrimSuffix(d.c.SimWS, "/")
	start := func(i int) error {
		_, err := d.c.StartNodeWith(fmt.Sprintf("n%d", i+1), proc.NodeOptions{WeComURL: wecom})
		return err
	}
	// The nodes start together, as a first deploy under systemd does. On
	// r3, three nodes declaring a fresh cluster at once took 1.5–2.3
	// minutes (each bucket's create or direct-gets update timing out at
	// 30 s in turn), past the 90 s start timeout, until serve took an etcd
	// lock around the declaration (declareLock): now under a second. The
	// r3 smoke is that regression test.
	var wg sync.WaitGroup
	errs := make([]error, nodes)
	for i := 0; i < nodes; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = start(i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return d, err
		}
	}
	leaders, err := d.c.WaitStable(2 * time.Minute)
	if err != nil {
		return d, err
	}
	d.leader = leaders[rampBot]
	return d, nil
}

// Role names of the shared state: "etcd" and "nats" on the single
// topology, "etcd e1", "nats n2", … (one per member) on r3. The report
// sums a role's members, so its etcd and NATS columns mean the same on
// both.
const (
	etcdRole = "etcd"
	natsRole = "nats"
)

// memberOf says whether role is group's process or one of its members
// (group "etcd": "etcd", "etcd e1", …).
func memberOf(role, group string) bool {
	return role == group || strings.HasPrefix(role, group+" ")
}

// procs are the deployment's processes by role name (leader n1, worker
// n2, etcd, etcd e1, …).
func (d *deployment) procs() map[string]int {
	out := map[string]int{"sim": d.c.Sim.Pid()}
	if d.infra != nil {
		for _, m := range d.infra.Etcd {
			out[etcdRole+" "+m.Name] = m.Proc.Pid()
		}
		for _, m := range d.infra.NATS {
			out[natsRole+" "+m.Name] = m.Proc.Pid()
		}
	} else {
		out[etcdRole], out[natsRole] = d.etcd.Pid(), d.nats.Pid()
	}
	for _, n := range d.c.Nodes() {
		role := "worker " + n.ID
		if n.ID == d.leader {
			role = "leader " + n.ID
		}
		out[role] = n.Proc.Pid()
	}
	return out
}

// pprofTargets are where the deployment's processes serve Go's profiler,
// by the role names of procs: every node's API (its token), each etcd
// member and NATS server.
func (d *deployment) pprofTargets() (map[string]pprofTarget, error) {
	out := map[string]pprofTarget{}
	if d.infra != nil {
		for _, m := range d.infra.Etcd {
			out[etcdRole+" "+m.Name] = pprofTarget{base: m.ProfURL}
		}
		for _, m := range d.infra.NATS {
			out[natsRole+" "+m.Name] = pprofTarget{base: m.ProfURL}
		}
	} else {
		for role, p := range map[string]*proc.Proc{etcdRole: d.etcd, natsRole: d.nats} {
			t, err := childPprof(p)
			if err != nil {
				return nil, err
			}
			out[role] = t
		}
	}
	for _, n := range d.c.Nodes() {
		role := "worker " + n.ID
		if n.ID == d.leader {
			role = "leader " + n.ID
		}
		out[role] = pprofTarget{base: n.API + "/debug/pprof/", token: n.Token}
	}
	return out, nil
}

func (d *deployment) close() {
	if d.c != nil {
		// Nodes first, with SIGTERM (they resign and flush), then the rest.
		for _, n := range d.c.Nodes() {
			n.Proc.Signal(syscall.SIGTERM)
		}
		for _, n := range d.c.Nodes() {
			if _, err := n.Proc.Wait(20 * time.Second); err != nil {
				n.Proc.Kill()
			}
		}
		d.c.Close()
	}
	if d.infra != nil {
		// Killed, not stopped: the step's data is discarded, and a member
		// that outlives its quorum would only wait for it.
		d.infra.Close()
	}
	for _, p := range []*proc.Proc{d.nats, d.etcd} {
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
	prof := fs.Bool("pprof", false, "serve Go's profiler on a loopback port (printed: \"pprof: URL\")")
	fs.Parse(args)
	if *prof {
		if err := servePprof(); err != nil {
			return err
		}
	}
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
	sync := fs.String("sync", "always", `JetStream sync_interval: "always" or an interval such as 2m`)
	prof := fs.Bool("pprof", false, "serve Go's profiler on a loopback port (printed: \"pprof: URL\"), as nats-server's ProfPort does")
	fs.Parse(args)
	if *prof {
		if err := servePprof(); err != nil {
			return err
		}
	}
	interval, err := infra.ParseSync(*sync)
	if err != nil {
		return fmt.Errorf("nats: -sync %q: %w", *sync, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	n, err := infra.StartNATS(infra.NATSConfig{DataDir: *dir, Addr: "127.0.0.1:0", SyncInterval: interval, Logger: zerolog.New(os.Stderr).Level(zerolog.WarnLevel)})
	if err != nil {
		return err
	}
	defer n.Close()
	fmt.Printf("nats ready: %s\n", n.ClientURL())
	<-ctx.Done()
	return nil
}
