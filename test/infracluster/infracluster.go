// Package infracluster starts botctl's shared state the way production
// runs it: an etcd cluster of several members and a NATS cluster with
// JetStream, every member a process of its own (an infranode child, see
// ./infranode), all on loopback. test/chaos kills, stops and restarts
// members under traffic; test/load's r3 ramp measures the nodes on it.
//
// It guarantees that Start returns only once etcd commits a write and
// JetStream answers through every NATS server, and that Restart reuses a
// member's data dir, so the member rejoins as itself. It does not run
// TLS or authentication, and by default etcd does not fsync (see
// Options.EtcdFsync): it is test scaffolding, not a deployment tool.
package infracluster

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/botctl/botctl/internal/faultproxy"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/botctl/botctl/test/e2e/cluster"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// NodePackage is the infranode main package, relative to the repository
// root.
const NodePackage = "./test/infracluster/infranode"

// Build compiles infranode into dir and returns the binary's path.
func Build(dir string) (string, error) { return cluster.BuildPackage(dir, NodePackage, "infranode") }

// Member is one etcd member or NATS server, a process of its own.
type Member struct {
	Name string
	Args []string // infranode arguments (the same on every restart)
	URL  string   // client URL
	// ProfURL is where the member serves Go's profiler, with Options.Pprof
	// ("http://127.0.0.1:P/debug/pprof/"; "" without): an etcd member's
	// client URL, a NATS server's profiling port.
	ProfURL string
	Proc    *cluster.Proc
}

// Options configure Start.
type Options struct {
	// Bin is the infranode binary (Build). Required.
	Bin string
	// Dir holds every member's data dir. Required.
	Dir string
	// Size is the number of etcd members and of NATS servers. Default 3,
	// the smallest cluster that survives the loss of one member.
	Size int
	// Timeout bounds the wait for every member's ready line and then for
	// a healthy cluster. Default 2 minutes.
	Timeout time.Duration
	// EtcdFsync makes every etcd member fsync its log, as production's
	// do. Off by default: a killed process loses nothing without it (only
	// a power cut would), and members on one shared disk commit much
	// faster. Turn it on where etcd's cost is measured.
	EtcdFsync bool
	// NATSSync is every NATS server's JetStream sync_interval: "always"
	// (fsync every write, as botctl's production examples choose) or an
	// interval such as "2m". Empty: nats-server's default, 2 minutes —
	// fine where a killed process is the fault (nothing is lost that a
	// power cut would not take); set "always" where its cost is measured.
	NATSSync string
	// Pprof makes every member serve Go's profiler (Member.ProfURL): etcd
	// on its client URL, nats-server on a profiling port of its own
	// (ProfPort). Off by default; a profile is only taken when asked for.
	Pprof bool
	// LogDir, if set, gets every member's whole stderr (cluster.LogFileName
	// of its process name, appended across restarts).
	LogDir string
	// RouteProxies routes every NATS server's route to each other server
	// through a fault proxy of that pair's own, so IsolateNATS can cut one
	// server off from its cluster while its clients stay connected. Each
	// server then advertises a route URL nothing listens on: a route
	// learned from gossip cannot go around the proxies.
	RouteProxies bool
}

// Infra is an etcd cluster and a NATS cluster with JetStream, each member
// an infranode process.
type Infra struct {
	bin  string
	opts Options
	Etcd []*Member
	NATS []*Member

	// routeLinks[[2]int{i, j}] carries the routes server i dials to
	// server j (Options.RouteProxies).
	routeLinks map[[2]int]*faultproxy.Proxy

	mu    sync.Mutex
	procs []*cluster.Proc
}

// Start starts o.Size etcd members and o.Size NATS servers under o.Dir
// and waits until etcd has a leader and JetStream answers. Close the
// Infra even on error: the members started so far are in it.
func Start(o Options) (*Infra, error) {
	if o.Size == 0 {
		o.Size = 3
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	in := &Infra{bin: o.Bin, opts: o}
	if o.Bin == "" || o.Dir == "" {
		return in, fmt.Errorf("infracluster: Options.Bin and Options.Dir are required")
	}
	size, dir, timeout := o.Size, o.Dir, o.Timeout
	ports, err := infra.FreePorts(6 * size)
	if err != nil {
		return in, err
	}
	profPorts := ports[4*size : 5*size]
	deadPorts := ports[5*size:] // advertised route URLs with RouteProxies: nothing listens there
	var initial []string
	for i := 0; i < size; i++ {
		initial = append(initial, fmt.Sprintf("e%d=http://127.0.0.1:%d", i+1, ports[2*i+1]))
	}
	for i := 0; i < size; i++ {
		name := fmt.Sprintf("e%d", i+1)
		in.Etcd = append(in.Etcd, &Member{Name: name, URL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]), Args: []string{"etcd",
			"-name", name, "-dir", filepath.Join(dir, name),
			"-client", fmt.Sprintf("127.0.0.1:%d", ports[2*i]), "-peer", fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]),
			"-initial-cluster", strings.Join(initial, ","), "-unsafe-no-fsync=" + strconv.FormatBool(!o.EtcdFsync)}})
		if o.Pprof {
			m := in.Etcd[i]
			m.Args, m.ProfURL = append(m.Args, "-pprof"), m.URL+"/debug/pprof/"
		}
	}
	np := ports[2*size:]
	for i := 0; i < size; i++ {
		name := fmt.Sprintf("n%d", i+1)
		var routes []string
		for j := 0; j < size; j++ {
			if j == i {
				continue
			}
			to := fmt.Sprintf("127.0.0.1:%d", np[2*j+1])
			if o.RouteProxies {
				p, err := faultproxy.New("127.0.0.1:0", to)
				if err != nil {
					return in, err
				}
				if in.routeLinks == nil {
					in.routeLinks = map[[2]int]*faultproxy.Proxy{}
				}
				in.routeLinks[[2]int{i, j}] = p
				to = p.Addr()
			}
			routes = append(routes, "nats://"+to)
		}
		in.NATS = append(in.NATS, &Member{Name: name, URL: fmt.Sprintf("nats://127.0.0.1:%d", np[2*i]), Args: []string{"nats",
			"-name", name, "-dir", filepath.Join(dir, "nats-"+name),
			"-port", strconv.Itoa(np[2*i]), "-cluster-port", strconv.Itoa(np[2*i+1]), "-routes", strings.Join(routes, ","), "-sync", o.NATSSync}})
		if o.RouteProxies {
			m := in.NATS[i]
			m.Args = append(m.Args, "-cluster-advertise", fmt.Sprintf("127.0.0.1:%d", deadPorts[i]))
		}
		if o.Pprof {
			m := in.NATS[i]
			m.Args = append(m.Args, "-prof-port", strconv.Itoa(profPorts[i]))
			m.ProfURL = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", profPorts[i])
		}
	}
	// Members of a new cluster wait for each other: start all, then wait.
	for _, m := range in.Members() {
		if err := in.startMember(m); err != nil {
			return in, err
		}
	}
	for _, m := range in.Members() {
		if _, err := m.Proc.WaitStdout("ready:", timeout); err != nil {
			return in, err
		}
	}
	return in, in.WaitHealthy(timeout)
}

func (in *Infra) startMember(m *Member) error {
	o := cluster.StartOptions{}
	if in.opts.LogDir != "" {
		o.LogFile = filepath.Join(in.opts.LogDir, cluster.LogFileName("infra "+m.Name))
	}
	p, err := cluster.StartProc("infra "+m.Name, in.bin, m.Args, o)
	if err != nil {
		return err
	}
	in.mu.Lock()
	in.procs = append(in.procs, p)
	in.mu.Unlock()
	m.Proc = p
	return nil
}

// Members are every etcd member, then every NATS server.
func (in *Infra) Members() []*Member {
	return append(append([]*Member(nil), in.Etcd...), in.NATS...)
}

// Restart starts a killed or stopped member again with its data dir and
// waits for its ready line.
func (in *Infra) Restart(m *Member, timeout time.Duration) error {
	m.Proc.Kill()
	if err := in.startMember(m); err != nil {
		return err
	}
	_, err := m.Proc.WaitStdout("ready:", timeout)
	return err
}

// EtcdURLs are every member's client URL.
func (in *Infra) EtcdURLs() []string {
	var out []string
	for _, m := range in.Etcd {
		out = append(out, m.URL)
	}
	return out
}

// NATSURLs are every server's client URL, comma-separated (for the CLI).
func (in *Infra) NATSURLs() string {
	var out []string
	for _, m := range in.NATS {
		out = append(out, m.URL)
	}
	return strings.Join(out, ",")
}

// WaitHealthy waits until a write to etcd commits and JetStream serves
// account info through every NATS server (the meta group has a leader).
func (in *Infra) WaitHealthy(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		if last = in.healthyOnce(ctx); last == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("etcd/NATS cluster not healthy within %v: %v", timeout, last)
}

func (in *Infra) healthyOnce(ctx context.Context) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: in.EtcdURLs(), DialTimeout: 2 * time.Second})
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = cli.Put(cctx, "/botctl-infracluster/health", time.Now().String())
	cancel()
	if err != nil {
		return fmt.Errorf("etcd put: %w", err)
	}
	for _, m := range in.NATS {
		nc, err := nats.Connect(m.URL, nats.Timeout(2*time.Second))
		if err != nil {
			return fmt.Errorf("nats %s: %w", m.Name, err)
		}
		js, err := natsjs.New(nc)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, err = js.AccountInfo(cctx)
			cancel()
		}
		nc.Close()
		if err != nil {
			return fmt.Errorf("jetstream via %s: %w", m.Name, err)
		}
	}
	return nil
}

// Stop sends SIGTERM to a member (a graceful shutdown, as an upgrade
// does) and waits for it to exit; past timeout it kills it.
func (in *Infra) Stop(m *Member, timeout time.Duration) error {
	if err := m.Proc.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if _, err := m.Proc.Wait(timeout); err != nil {
		m.Proc.Kill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM (killed)", m.Name, timeout)
	}
	return nil
}

// EtcdLeader is the member that is raft leader now.
func (in *Infra) EtcdLeader() (*Member, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: in.EtcdURLs(), DialTimeout: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	for _, m := range in.Etcd {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		st, err := cli.Status(ctx, m.URL)
		cancel()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no etcd member says it is the leader")
}

// IsolateNATS blackholes every route between NATS server m and the other
// servers (Options.RouteProxies): m's clients stay connected and are
// answered, while m hears nothing of its cluster. HealNATS ends it.
func (in *Infra) IsolateNATS(m *Member) error { return in.routes(m, (*faultproxy.Proxy).Blackhole) }

// HealNATS ends IsolateNATS.
func (in *Infra) HealNATS(m *Member) error { return in.routes(m, (*faultproxy.Proxy).Heal) }

func (in *Infra) routes(m *Member, do func(*faultproxy.Proxy)) error {
	if in.routeLinks == nil {
		return fmt.Errorf("infracluster: no route proxies (Options.RouteProxies)")
	}
	i := slices.Index(in.NATS, m)
	if i < 0 {
		return fmt.Errorf("infracluster: %s is not a NATS server of this cluster", m.Name)
	}
	for pair, p := range in.routeLinks {
		if pair[0] == i || pair[1] == i {
			do(p)
		}
	}
	return nil
}

// Close kills every member process.
func (in *Infra) Close() {
	in.mu.Lock()
	procs := in.procs
	in.mu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
	for _, p := range in.routeLinks {
		p.Close()
	}
}

// Dump is every member's stderr tail.
func (in *Infra) Dump(lines int) string {
	var b strings.Builder
	for _, m := range in.Members() {
		if m.Proc != nil {
			fmt.Fprintf(&b, "=== %s (pid %d)\n%s", m.Name, m.Proc.Pid(), m.Proc.StderrTail(lines))
		}
	}
	return b.String()
}

// WaitStreamsCurrent waits until every JetStream stream (buckets included)
// has a leader and every replica is current: a cluster that has settled
// after a start or a fault. A stream created seconds ago may still have
// followers catching up, and a follower catching up does not stand for
// leader: freezing the leader then stalls the stream until it thaws.
func (in *Infra) WaitStreamsCurrent(timeout time.Duration) error {
	return in.waitJetStream(timeout, "streams", streamsCurrent)
}

// WaitReplicasCurrent is WaitStreamsCurrent, and then, within the same
// timeout, every consumer of more than one replica has a leader and every
// replica current: what a restarted nats-server's /healthz checks before
// it says ok (the rolling restart docs/operations.md describes).
func (in *Infra) WaitReplicasCurrent(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if err := in.WaitStreamsCurrent(timeout); err != nil {
		return err
	}
	return in.waitJetStream(time.Until(deadline), "consumers", consumersCurrent)
}

// waitJetStream polls check over a connection of its own until it
// passes or timeout; what names the objects checked in the error.
func (in *Infra) waitJetStream(timeout time.Duration, what string, check func(context.Context, natsjs.JetStream) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	nc, err := nats.Connect(in.NATSURLs(), nats.Timeout(2*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	var last error
	for ctx.Err() == nil {
		if last = check(ctx, js); last == nil {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("JetStream %s not current within %v: %v", what, timeout, last)
}

func streamsCurrent(ctx context.Context, js natsjs.JetStream) error {
	l := js.ListStreams(ctx)
	for si := range l.Info() {
		c := si.Cluster
		if c == nil {
			continue
		}
		if c.Leader == "" {
			return fmt.Errorf("stream %s has no leader", si.Config.Name)
		}
		for _, r := range c.Replicas {
			if !r.Current || r.Offline {
				return fmt.Errorf("stream %s: replica %s not current (lag %d, offline %v)", si.Config.Name, r.Name, r.Lag, r.Offline)
			}
		}
	}
	return l.Err()
}

// consumersCurrent: every consumer of more than one replica has a leader
// and every replica current. Single-replica consumers (the ordered ones
// behind KV watches) are skipped: they have no followers, and their
// clients make them anew when their server goes.
func consumersCurrent(ctx context.Context, js natsjs.JetStream) error {
	names := js.StreamNames(ctx)
	var streams []string
	for n := range names.Name() {
		streams = append(streams, n)
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("stream names: %w", err)
	}
	for _, sn := range streams {
		s, err := js.Stream(ctx, sn)
		if err != nil {
			return fmt.Errorf("stream %s: %w", sn, err)
		}
		l := s.ListConsumers(ctx)
		for ci := range l.Info() {
			c := ci.Cluster
			if c == nil || ci.Config.Replicas == 1 {
				continue
			}
			if c.Leader == "" {
				return fmt.Errorf("consumer %s > %s has no leader", sn, ci.Name)
			}
			for _, p := range c.Replicas {
				if !p.Current || p.Offline {
					return fmt.Errorf("consumer %s > %s: replica %s not current (lag %d, offline %v)", sn, ci.Name, p.Name, p.Lag, p.Offline)
				}
			}
		}
		if err := l.Err(); err != nil {
			return fmt.Errorf("consumers of %s: %w", sn, err)
		}
	}
	return nil
}
