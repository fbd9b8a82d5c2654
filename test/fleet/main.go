// Command fleet measures a fleet of bots on real botctl processes: one
// `botctl infra`, one `botctl sim` and -nodes `botctl serve` nodes, all
// built from this tree, every node serving every bot (--bot flags), the
// production election settings (TTL 20s, safety margin 5s, pulse every 1s,
// pulse timeout 3s). No traffic: the fleet's idle cost is the subject.
//
//	go run ./test/fleet -bots 1000 -out bench/fleet.md
//
// In order:
//
//   - cold start: the nodes are started together; the time from then
//     until each bot's first subscribe at the simulator (every bot led);
//   - idle: after -settle, for -idle, etcd revisions a second (the
//     revision's growth) and which keys wrote them (a watch on every key),
//     CPU of infra (etcd and NATS) and of each node, then RSS and
//     goroutines of each node;
//   - kill -9 of the node leading most bots: each of its bots' takeover,
//     from the signal to the bot's next subscribe at the simulator; then
//     the node is started again and the spread followed for -rebalance;
//   - soak: for -soak, etcd's db size and revision every 30s, compacting
//     at the revision of -retention ago every minute (the embedded etcd
//     compacts with a 1h retention on its own: a soak shorter than an
//     hour would not see it).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/botctl/botctl/test/e2e/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type options struct {
	bots, nodes                              int
	settle, idle, soak, retention, rebalance time.Duration
	out, nodeArgs                            string
	keep                                     bool
}

func main() {
	var o options
	flag.IntVar(&o.bots, "bots", 1000, "bots, every node serving every one")
	flag.IntVar(&o.nodes, "nodes", 3, "botctl serve nodes")
	flag.DurationVar(&o.settle, "settle", time.Minute, "wait after every bot is led before the idle window")
	flag.DurationVar(&o.idle, "idle", time.Minute, "the idle window")
	flag.DurationVar(&o.rebalance, "rebalance", 3*time.Minute, "after the killed node is back: how long the spread is followed")
	flag.DurationVar(&o.soak, "soak", 10*time.Minute, "the db size and revision followed this long")
	flag.DurationVar(&o.retention, "retention", 5*time.Minute, "soak: compact at the revision of this long ago, every minute")
	flag.StringVar(&o.out, "out", "", "write the markdown report here")
	flag.StringVar(&o.nodeArgs, "node-args", "", "extra botctl serve flags, space-separated")
	flag.BoolVar(&o.keep, "keep", false, "keep the data and log directory (its path is printed)")
	flag.Parse()
	r, err := run(o)
	if r != nil {
		report := r.render(o)
		fmt.Print(report)
		if o.out != "" {
			check(os.WriteFile(o.out, []byte(report), 0o644))
		}
	}
	check(err)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
}

// results is what the report says.
type results struct {
	started        time.Time
	load           string
	coldNodesReady []time.Duration
	coldLed        []time.Duration // per bot, sorted
	coldSpread     map[string]int
	idleWindow     time.Duration
	idleRevs       int64
	idleByDir      map[string]int
	cpu            map[string]float64 // process → share of one core
	rss            map[string]int64   // bytes
	goroutines     map[string]int
	killed         string
	killedBots     int
	takeovers      []time.Duration // sorted
	deposed        []time.Duration // per killed bot led again: from the kill to its deposition, sorted
	afterDeposed   []time.Duration // and from its deposition to its subscribe, sorted
	notLed         int
	afterKill      map[string]int
	rebalanced     []spreadAt
	soak           []soakSample
	soakCompacted  int64
	elapsed        time.Duration
}

type spreadAt struct {
	at     time.Duration
	spread map[string]int
}

type soakSample struct {
	at               time.Duration
	rev              int64
	dbSize, dbInUse  int64
	rssInfra, rssMax int64
}

func run(o options) (*results, error) {
	r := &results{started: time.Now(), load: loadavg()}
	dir, err := os.MkdirTemp("", "botctl-fleet-")
	if err != nil {
		return nil, err
	}
	if o.keep {
		logf("keeping %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if err := os.MkdirAll(dir+"/logs", 0o755); err != nil {
		return nil, err
	}
	bin, err := cluster.Build(dir)
	if err != nil {
		return nil, err
	}
	bots := make([]string, o.bots)
	for i := range bots {
		bots[i] = fmt.Sprintf("b%04d", i+1)
	}
	c, err := cluster.Start(cluster.Options{Bin: bin, Dir: dir, Bots: bots, TTL: 20 * time.Second, Margin: 5 * time.Second,
		NodeArgs: strings.Fields(o.nodeArgs), StartTimeout: 5 * time.Minute, LogDir: dir + "/logs"})
	if err != nil {
		if c != nil {
			c.Close() // what started before the failure
		}
		return nil, err
	}
	defer c.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.EtcdURL, ","), DialTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	defer cli.Close()

	if err := r.coldStart(c, o); err != nil {
		return r, err
	}
	if err := r.idleCost(c, cli, o); err != nil {
		return r, err
	}
	if err := r.kill(c, o); err != nil {
		return r, err
	}
	if o.soak > 0 {
		if err := r.soakDB(c, cli, o); err != nil {
			return r, err
		}
	}
	r.elapsed = time.Since(r.started)
	return r, nil
}

// coldStart starts every node at once and waits for every bot's first
// subscribe.
func (r *results) coldStart(c *cluster.Cluster, o options) error {
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, o.nodes)
	r.coldNodesReady = make([]time.Duration, o.nodes)
	for i := range o.nodes {
		wg.Go(func() {
			_, errs[i] = c.StartNode(fmt.Sprintf("n%d", i+1), "")
			r.coldNodesReady[i] = time.Since(t0)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	logf("nodes ready after %v", r.coldNodesReady)
	first := map[string]time.Duration{}
	deadline := t0.Add(20 * time.Minute)
	for len(first) < o.bots {
		if time.Now().After(deadline) {
			return fmt.Errorf("cold start: %d of %d bots led after %v", len(first), o.bots, time.Since(t0))
		}
		time.Sleep(500 * time.Millisecond)
		for _, s := range c.Subscribes() {
			if _, ok := first[s.Bot]; !ok {
				first[s.Bot] = s.At.Sub(t0)
			}
		}
		logf("cold start: %d of %d bots led after %v", len(first), o.bots, time.Since(t0).Round(time.Second))
	}
	for _, d := range first {
		r.coldLed = append(r.coldLed, d)
	}
	sort.Slice(r.coldLed, func(i, j int) bool { return r.coldLed[i] < r.coldLed[j] })
	r.coldSpread, _ = spread(c)
	return nil
}

// spread counts the bots each live node leads.
func spread(c *cluster.Cluster) (map[string]int, error) {
	leaders, err := c.Leaders()
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, n := range c.Alive() {
		out[n.ID] = 0
	}
	for _, ids := range leaders {
		for _, id := range ids {
			out[id]++
		}
	}
	return out, nil
}

// idleCost measures, after the settle, the revisions written, by whom, and
// each process's CPU, then RSS and goroutines.
func (r *results) idleCost(c *cluster.Cluster, cli *clientv3.Client, o options) error {
	logf("settling for %v", o.settle)
	time.Sleep(o.settle)
	procs := map[string]int{"infra": c.Infra.Pid()}
	for _, n := range c.Alive() {
		procs[n.ID] = n.Proc.Pid()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start, err := cli.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	byDir := map[string]int{}
	var mu sync.Mutex
	wch := cli.Watch(ctx, "/", clientv3.WithPrefix(), clientv3.WithRev(start.Header.Revision+1))
	go func() {
		for wr := range wch {
			mu.Lock()
			for _, ev := range wr.Events {
				byDir[dirOf(string(ev.Kv.Key))]++
			}
			mu.Unlock()
		}
	}()
	cpu0 := cpuTimes(procs)
	t0 := time.Now()
	logf("idle window of %v", o.idle)
	time.Sleep(o.idle)
	end, err := cli.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	r.idleWindow = time.Since(t0)
	cpu1 := cpuTimes(procs)
	r.cpu = map[string]float64{}
	for name := range procs {
		r.cpu[name] = (cpu1[name] - cpu0[name]).Seconds() / r.idleWindow.Seconds()
	}
	r.idleRevs = end.Header.Revision - start.Header.Revision
	time.Sleep(time.Second) // the watch delivers the window's last events
	mu.Lock()
	r.idleByDir = byDir
	mu.Unlock()
	r.rss, r.goroutines = map[string]int64{}, map[string]int{}
	for name, pid := range procs {
		r.rss[name] = rss(pid)
	}
	for _, n := range c.Alive() {
		r.goroutines[n.ID] = goroutines(n.API)
	}
	logf("idle: %d revisions in %v; by key: %v", r.idleRevs, r.idleWindow.Round(time.Millisecond), r.idleByDir)
	return nil
}

// dirOf is a key's directory under /botctl/ ("elect", "nodepulse", …).
func dirOf(key string) string {
	rest := strings.TrimPrefix(key, "/botctl/")
	if d, _, ok := strings.Cut(rest, "/"); ok {
		return d
	}
	return rest
}

// kill sends SIGKILL to the node leading most bots and waits for each of
// its bots to be subscribed again; then restarts it and follows the
// spread.
func (r *results) kill(c *cluster.Cluster, o options) error {
	leaders, err := c.Leaders()
	if err != nil {
		return err
	}
	byNode := map[string][]string{}
	for bot, ids := range leaders {
		if len(ids) == 1 {
			byNode[ids[0]] = append(byNode[ids[0]], bot)
		}
	}
	for id, bots := range byNode {
		if len(bots) > len(byNode[r.killed]) {
			r.killed = id
		}
	}
	victim := c.Node(r.killed)
	bots := byNode[r.killed]
	r.killedBots = len(bots)
	logf("kill -9 of %s, leading %d bots", r.killed, len(bots))
	t0 := time.Now()
	if err := syscall.Kill(victim.Proc.Pid(), syscall.SIGKILL); err != nil {
		return err
	}
	want := map[string]bool{}
	for _, b := range bots {
		want[b] = true
	}
	seen := map[string]time.Duration{}
	deadline := t0.Add(3 * time.Minute)
	for len(seen) < len(want) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		for _, s := range c.Subscribes() {
			if want[s.Bot] && s.At.After(t0) {
				if _, ok := seen[s.Bot]; !ok {
					seen[s.Bot] = s.At.Sub(t0)
				}
			}
		}
	}
	r.notLed = len(want) - len(seen)
	var others []string
	for i := range o.nodes {
		if id := fmt.Sprintf("n%d", i+1); id != r.killed {
			others = append(others, id)
		}
	}
	deposed := depositions(c.Opts.LogDir, others, want, t0)
	for bot, d := range seen {
		r.takeovers = append(r.takeovers, d)
		if dd, ok := deposed[bot]; ok {
			r.deposed = append(r.deposed, dd)
			r.afterDeposed = append(r.afterDeposed, d-dd)
		}
	}
	for _, s := range [][]time.Duration{r.takeovers, r.deposed, r.afterDeposed} {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	}
	<-victim.Proc.Done()
	time.Sleep(5 * time.Second)
	r.afterKill, _ = spread(c)
	logf("takeovers: %d of %d, max %v; spread %v", len(seen), len(want), pct(r.takeovers, 1), r.afterKill)
	if _, err := c.RestartNode(r.killed); err != nil {
		return err
	}
	back := time.Now()
	for time.Since(back) < o.rebalance {
		time.Sleep(15 * time.Second)
		s, err := spread(c)
		if err == nil {
			r.rebalanced = append(r.rebalanced, spreadAt{at: time.Since(back).Round(time.Second), spread: s})
			logf("spread %v after the node's return: %v", time.Since(back).Round(time.Second), s)
		}
	}
	return nil
}

// soakDB follows etcd's db size and revision, compacting as an etcd with
// a retention of o.retention would.
func (r *results) soakDB(c *cluster.Cluster, cli *clientv3.Client, o options) error {
	type mark struct {
		at  time.Time
		rev int64
	}
	var marks []mark
	t0 := time.Now()
	lastCompact := t0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := cli.Status(ctx, strings.Split(c.EtcdURL, ",")[0])
		cancel()
		if err != nil {
			return err
		}
		now := time.Now()
		marks = append(marks, mark{now, st.Header.Revision})
		s := soakSample{at: now.Sub(t0).Round(time.Second), rev: st.Header.Revision, dbSize: st.DbSize, dbInUse: st.DbSizeInUse, rssInfra: rss(c.Infra.Pid())}
		for _, n := range c.Alive() {
			s.rssMax = max(s.rssMax, rss(n.Proc.Pid()))
		}
		r.soak = append(r.soak, s)
		logf("soak %v: revision %d, db %d B (in use %d B)", s.at, s.rev, s.dbSize, s.dbInUse)
		if now.Sub(lastCompact) >= time.Minute {
			lastCompact = now
			var at int64
			for _, m := range marks {
				if now.Sub(m.at) >= o.retention {
					at = m.rev
				}
			}
			if at > r.soakCompacted {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := cli.Compact(ctx, at)
				cancel()
				if err == nil {
					r.soakCompacted = at
				}
			}
		}
		if now.Sub(t0) >= o.soak {
			return nil
		}
		time.Sleep(30 * time.Second)
	}
}
