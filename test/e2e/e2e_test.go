package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/faultproxy"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/test/e2e/cluster"
)

// a. One leader per bot; `botctl status --json`, every node's /status and
// the simulator agree.
func TestOneLeaderPerBot(t *testing.T) {
	t.Parallel()
	bots := []string{"b1", "b2", "b3"}
	c := newCluster(t, bots)
	startNodes(t, c, 3)
	leaders := waitStable(t, c)
	t.Logf("leaders: %v", leaders)

	testwait.NoError(t, 15*time.Second, testwait.Every, "botctl status --json agrees with the nodes", func() error {
		raw, err := c.Status(ctxTimeout(t, 15*time.Second))
		if err != nil {
			return err
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(raw, &top); err != nil {
			return fmt.Errorf("status --json is not a JSON object: %v\n%s", err, raw)
		}
		var keys []string
		for k := range top {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if !slices.Equal(keys, []string{"bots", "nodes"}) {
			t.Fatalf("status --json top-level keys = %v, want exactly [bots nodes]\n%s", keys, raw)
		}
		var st struct {
			Nodes []struct {
				ID          string `json:"id"`
				SpoolDepth  *int   `json:"spool_depth"`
				WorkerSlots *int   `json:"worker_slots"`
				Unreachable string `json:"unreachable"`
			} `json:"nodes"`
			Bots []map[string]json.RawMessage `json:"bots"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, raw)
		}
		var nodeIDs []string
		for _, n := range st.Nodes {
			nodeIDs = append(nodeIDs, n.ID)
			// What only the node knows comes from its API: tasks held in
			// its spool, its worker slots.
			if n.SpoolDepth == nil || *n.SpoolDepth != 0 || n.WorkerSlots == nil || *n.WorkerSlots <= 0 {
				return fmt.Errorf("node %s: spool_depth %v, worker_slots %v (unreachable %q)", n.ID, n.SpoolDepth, n.WorkerSlots, n.Unreachable)
			}
		}
		sort.Strings(nodeIDs)
		if !slices.Equal(nodeIDs, []string{"n1", "n2", "n3"}) {
			return fmt.Errorf("status nodes = %v, want [n1 n2 n3]", nodeIDs)
		}
		if len(st.Bots) != len(bots) {
			return fmt.Errorf("status has %d bots, want %d\n%s", len(st.Bots), len(bots), raw)
		}
		for _, b := range st.Bots {
			// The shared health record, from JetStream: online once the
			// leader has written it.
			var h struct {
				State string `json:"state"`
				Node  string `json:"node"`
			}
			if raw, ok := b["health"]; !ok || json.Unmarshal(raw, &h) != nil || h.State != "online" {
				return fmt.Errorf("bot health in status --json: %s", b["health"])
			}
			// Its tasks in the work queue, from JetStream: none at rest.
			if q, ok := b["queue"]; !ok || string(q) != "0" {
				return fmt.Errorf("bot queue in status --json: %s, want 0", q)
			}
			for _, k := range []string{"id", "leader", "since"} {
				if _, ok := b[k]; !ok {
					t.Fatalf("a bot in status --json lacks %q: %s", k, raw)
				}
			}
			var id, leader string
			var since *time.Time
			json.Unmarshal(b["id"], &id)
			json.Unmarshal(b["leader"], &leader)
			if err := json.Unmarshal(b["since"], &since); err != nil || since == nil || since.IsZero() {
				return fmt.Errorf("bot %s: since = %s, want the term's start time", id, b["since"])
			}
			if leaders[id] != leader {
				return fmt.Errorf("bot %s: status says leader %q, the nodes say %q", id, leader, leaders[id])
			}
		}
		return nil
	})

	// The leaders did not move while we looked, and every bot is connected
	// once, with no kicks.
	again := waitStable(t, c)
	if fmt.Sprint(again) != fmt.Sprint(leaders) {
		t.Errorf("leaders moved without a fault: %v then %v", leaders, again)
	}
	for _, b := range bots {
		s, err := c.Stats(b)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Connected || s.Connections != 1 || s.Kicks != 0 {
			t.Errorf("bot %s at the simulator: connected=%v connections=%d kicks=%d, want true/1/0", b, s.Connected, s.Connections, s.Kicks)
		}
	}
}

// b. Graceful stop: SIGTERM on a leader → a new leader is subscribed within
// one campaign round (well below the TTL), the old node exits 0, no kicks.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	bots := []string{"b1", "b2"}
	c := newCluster(t, bots)
	startNodes(t, c, 3)
	leaders := waitStable(t, c)
	old := c.Node(leaders["b1"])

	t0 := time.Now()
	if err := old.Proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sub, err := c.WaitSubscribed("b1", t0, 3*ttl)
	if err != nil {
		t.Fatal(err)
	}
	took := sub.At.Sub(t0)
	t.Logf("graceful handover of b1 from %s: new connection subscribed %v after SIGTERM (TTL %v)", old.ID, took.Round(time.Millisecond), ttl)
	if took >= ttl {
		t.Errorf("graceful handover took %v, want well below the TTL %v (resign must be immediate)", took, ttl)
	}
	code, err := old.Proc.Wait(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Errorf("node %s exited %d after SIGTERM, want 0", old.ID, code)
	}
	after := waitStable(t, c)
	if after["b1"] == old.ID {
		t.Fatalf("b1 still led by the stopped node %s", old.ID)
	}
	requireNoKicks(t, c, bots...)
}

// c. Crash: SIGKILL on the leader → another node takes over once the lease
// expires (about the TTL), no kicks.
func TestCrashTakeover(t *testing.T) {
	t.Parallel()
	c := newCluster(t, []string{"b1"})
	startNodes(t, c, 3)
	leaders := waitStable(t, c)
	old := c.Node(leaders["b1"])

	t0 := time.Now()
	old.Proc.Kill()
	sub, err := c.WaitSubscribed("b1", t0, ttl+15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	took := sub.At.Sub(t0)
	t.Logf("crash takeover of b1 from %s: new connection subscribed %v after SIGKILL (TTL %v)", old.ID, took.Round(time.Millisecond), ttl)
	if limit := ttl + 3*time.Second; took > limit {
		t.Errorf("crash takeover took %v, want at most TTL + slack = %v", took, limit)
	}
	after := waitStable(t, c)
	if after["b1"] == old.ID {
		t.Fatalf("b1 still led by the killed node %s", old.ID)
	}
	requireNoKicks(t, c, "b1")
}

// d. Partition: the leader loses etcd (its traffic runs through a fault
// proxy that blackholes it) → it closes its connection before another node
// takes over (no kick); after healing it does not reconnect over the new
// leader.
func TestPartitionLeaderLosesEtcd(t *testing.T) {
	t.Parallel()
	c := newCluster(t, []string{"b1"})
	proxy, err := faultproxy.New("127.0.0.1:0", strings.TrimPrefix(c.EtcdURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })

	n1 := startNode(t, c, "n1", "http://"+proxy.Addr())
	if l := waitStable(t, c); l["b1"] != "n1" {
		t.Fatalf("b1 led by %s, want n1 (the only node)", l["b1"])
	}
	startNode(t, c, "n2", "")
	startNode(t, c, "n3", "")
	if l := waitStable(t, c); l["b1"] != "n1" {
		t.Fatalf("b1 moved to %s when other nodes joined", l["b1"])
	}
	before, err := c.Stats("b1")
	if err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	proxy.Blackhole()
	sub, err := c.WaitSubscribed("b1", t0, ttl+20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("partition: another node subscribed b1 %v after n1 lost etcd (TTL %v, margin %v)", sub.At.Sub(t0).Round(time.Millisecond), ttl, margin)
	var newLeader string
	testwait.NoError(t, 15*time.Second, testwait.Every, "one new leader, n1 not leading", func() error {
		l, err := c.Leaders()
		if err != nil {
			return err
		}
		if len(l["b1"]) != 1 || l["b1"][0] == "n1" {
			return fmt.Errorf("leaders of b1: %v", l["b1"])
		}
		newLeader = l["b1"][0]
		return nil
	})
	requireNoKicks(t, c, "b1")
	mid, err := c.Stats("b1")
	if err != nil {
		t.Fatal(err)
	}
	if mid.Connections != before.Connections+1 {
		t.Errorf("connections %d → %d during the partition, want exactly one new", before.Connections, mid.Connections)
	}

	proxy.Heal()
	testwait.NoError(t, 30*time.Second, testwait.Every, "n1 reaches etcd again", func() error {
		if !n1.Healthy() {
			return fmt.Errorf("n1 /healthz not ok")
		}
		return nil
	})
	testwait.NoError(t, 30*time.Second, testwait.Every, "n1 back to standby", func() error {
		info, err := n1.Info()
		if err != nil {
			return err
		}
		if st := info.Bots["b1"].State; st != "standby" {
			return fmt.Errorf("n1 b1 state %q", st)
		}
		return nil
	})
	// The negative check needs a window: for two TTLs, n1 must not connect
	// (which would kick the new leader) and leadership must not move.
	end := time.Now().Add(2 * ttl)
	for time.Now().Before(end) {
		s, err := c.Stats("b1")
		if err != nil {
			t.Fatal(err)
		}
		if s.Kicks != 0 || s.Connections != mid.Connections {
			t.Fatalf("after heal: kicks %d, connections %d → %d: the old leader reconnected over %s", s.Kicks, mid.Connections, s.Connections, newLeader)
		}
		time.Sleep(100 * time.Millisecond)
	}
	l, err := c.Leaders()
	if err != nil {
		t.Fatal(err)
	}
	if len(l["b1"]) != 1 || l["b1"][0] != newLeader {
		t.Errorf("after heal, leaders of b1 = %v, want [%s]", l["b1"], newLeader)
	}
}

// e. Messages posted while leadership moves: each delivered message is
// handled once (exactly one reply stream: its answer, or "busy" while the
// conversation has a task; or, when its connection closed before the
// reply, the answer or the busy notice by push), and each answer reaches
// the user exactly once, by its stream's final frame or, if the stream
// began under the old leader, by a proactive push (requireHandledOnce).
func TestMessagesDuringHandover(t *testing.T) {
	t.Parallel()
	c := newCluster(t, []string{"b1"}, "--rate-limit", "100000")
	startNodes(t, c, 3)
	waitStable(t, c)

	users := []string{"u0", "u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8", "u9", "u10", "u11"}
	tr := startTraffic(t, c, "b1", users, 25*time.Millisecond)
	testStart := time.Now()
	for round := 0; round < 2; round++ {
		leaders := waitStable(t, c)
		t.Logf("round %d: stable at %s", round, time.Since(testStart).Round(time.Millisecond))
		tr.wait(15)
		old := c.Node(leaders["b1"])
		t0 := time.Now()
		if err := old.Proc.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitSubscribed("b1", t0, 3*ttl); err != nil {
			t.Fatal(err)
		}
		if code, err := old.Proc.Wait(20 * time.Second); err != nil || code != 0 {
			t.Fatalf("node %s after SIGTERM: exit %d, %v", old.ID, code, err)
		}
		if _, err := c.RestartNode(old.ID); err != nil {
			t.Fatal(err)
		}
	}
	waitStable(t, c)
	tr.wait(15)
	tr.requireHandledOnce(60 * time.Second)
	requireNoKicks(t, c, "b1")
}

// f. Bad flags are rejected with exit code 2 and an error naming the flag
// or config key; secrets are not echoed.
func TestBadFlags(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("e2e: skipped in -short mode")
	}
	dir := t.TempDir()
	base := []string{"serve", "--node-id", "n1", "--data-dir", dir, "--etcd", "http://127.0.0.1:1",
		"--nats", "nats://127.0.0.1:1", "--wecom-url", "ws://127.0.0.1:1/", "--listen", "127.0.0.1:0"}
	with := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"ttl below etcd minimum", with("--bot", "b1:s1", "--election-ttl", "1s"), "election.ttl"},
		{"margin not below ttl", with("--bot", "b1:s1", "--election-ttl", "3s", "--election-safety-margin", "5s"), "election.safety_margin"},
		{"ttl not a duration", with("--bot", "b1:s1", "--election-ttl", "soon"), "election"},
		{"etcd endpoint without scheme", []string{"serve", "--etcd", "localhost:2379"}, "etcd.endpoints"},
		{"etcd endpoint without scheme, full flags", with("--bot", "b1:s1", "--etcd", "localhost:2379"), "etcd.endpoints"},
		{"bot without id", with("--bot", ":topsecret"), "--bot"},
		{"unknown flag", with("--bot", "b1:s1", "--no-such-flag"), "no-such-flag"},
		{"infra without data dir", []string{"infra"}, "--data-dir"},
		{"infra etcd port 0", []string{"infra", "--data-dir", dir, "--etcd-listen", "127.0.0.1:0"}, "--etcd-listen"},
		{"sim bot without secret", []string{"sim", "--listen", "127.0.0.1:0", "--bot", "nosecret"}, "--bot"},
		{"unknown ai backend", with("--bot", "b1:s1", "--ai", "oracle"), "ai.kind"},
		{"push budget over WeCom's quota", with("--bot", "b1:s1", "--push-budget", "45"), "push.budget"},
		{"openai without model", with("--bot", "b1:s1", "--ai", "openai"), "ai.openai"},
		{"tasks state unknown", []string{"tasks", "list", "--state", "bogus"}, "--state"},
		{"tasks show without id", []string{"tasks", "show"}, "TASK_ID"},
		{"bots gate without env", []string{"bots", "gate", "--bot", "b1"}, "--env"},
		{"unknown command", []string{"frobnicate"}, "unknown command"},
		{"node API off loopback without a token", with("--bot", "b1:s1", "--listen", "0.0.0.0:0"), "api.token_file"},
		{"plain ws to another machine", with("--bot", "b1:s1", "--wecom-url", "ws://openws.example.com/"), "wecom.url"},
		{"password in the NATS URL", with("--bot", "b1:s1", "--nats", "nats://u:topsecret@127.0.0.1:1"), "nats.url"},
		{"NATS user without password", with("--bot", "b1:s1", "--nats-user", "botctl"), "nats.password_file"},
		{"infra off loopback", []string{"infra", "--data-dir", dir, "--etcd-listen", "0.0.0.0:23799"}, "--allow-remote"},
		{"demo off loopback", []string{"serve", "--demo", "--data-dir", dir, "--demo-listen", "0.0.0.0:0"}, "--allow-remote"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr, err := cluster.Run(bin, 20*time.Second, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if code != 2 {
				t.Errorf("botctl %s: exit %d, want 2\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, stdout, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("botctl %s: stderr does not name %q:\n%s", strings.Join(tc.args, " "), tc.want, stderr)
			}
			if strings.Contains(stdout+stderr, "topsecret") {
				t.Errorf("botctl %s echoed the secret:\n%s%s", strings.Join(tc.args, " "), stdout, stderr)
			}
		})
	}
}

// d (standby). Partition of a standby: losing etcd on a node that does not lead
// changes nothing for the bot; after healing the node is a standby again.
func TestPartitionStandbyLosesEtcd(t *testing.T) {
	t.Parallel()
	c := newCluster(t, []string{"b1"})
	proxy, err := faultproxy.New("127.0.0.1:0", strings.TrimPrefix(c.EtcdURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	startNode(t, c, "n1", "")
	if l := waitStable(t, c); l["b1"] != "n1" {
		t.Fatalf("b1 led by %s, want n1 (the only node)", l["b1"])
	}
	n2 := startNode(t, c, "n2", "http://"+proxy.Addr())
	startNode(t, c, "n3", "")
	waitStable(t, c)
	before, err := c.Stats("b1")
	if err != nil {
		t.Fatal(err)
	}

	proxy.Blackhole()
	// Long enough for n2's registration and any session of its own to
	// notice: two TTLs. The leader must not move and nothing may connect.
	end := time.Now().Add(2 * ttl)
	for time.Now().Before(end) {
		s, err := c.Stats("b1")
		if err != nil {
			t.Fatal(err)
		}
		if s.Connections != before.Connections || s.Kicks != 0 || !s.Connected {
			t.Fatalf("standby partitioned: connections %d → %d, kicks %d, connected %v", before.Connections, s.Connections, s.Kicks, s.Connected)
		}
		time.Sleep(100 * time.Millisecond)
	}
	proxy.Heal()
	testwait.NoError(t, 30*time.Second, testwait.Every, "n2 reaches etcd again", func() error {
		if !n2.Healthy() {
			return fmt.Errorf("n2 /healthz not ok")
		}
		return nil
	})
	if l := waitStable(t, c); l["b1"] != "n1" {
		t.Errorf("b1 moved to %s after a standby's partition healed", l["b1"])
	}
	requireNoKicks(t, c, "b1")
}

// d (WeCom side). Partition between the leader and WeCom: its connection is cut (a
// network blip) → it resigns and campaigns again; some node reconnects
// within a few seconds, with no kick and one leader.
func TestPartitionLeaderLosesWeCom(t *testing.T) {
	t.Parallel()
	c := newCluster(t, []string{"b1"})
	simAddr := strings.TrimSuffix(strings.TrimPrefix(c.SimWS, "ws://"), "/")
	proxy, err := faultproxy.New("127.0.0.1:0", simAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	if _, err := c.StartNodeWith("n1", cluster.NodeOptions{WeComURL: "ws://" + proxy.Addr() + "/"}); err != nil {
		t.Fatal(err)
	}
	if l := waitStable(t, c); l["b1"] != "n1" {
		t.Fatalf("b1 led by %s, want n1 (the only node)", l["b1"])
	}
	startNode(t, c, "n2", "")
	startNode(t, c, "n3", "")
	waitStable(t, c)

	t0 := time.Now()
	proxy.CutAll()
	sub, err := c.WaitSubscribed("b1", t0, 3*ttl)
	if err != nil {
		t.Fatal(err)
	}
	leaders := waitStable(t, c)
	t.Logf("WeCom connection of n1 cut: %s subscribed b1 %v later", leaders["b1"], sub.At.Sub(t0).Round(time.Millisecond))
	if took := sub.At.Sub(t0); took >= ttl {
		t.Errorf("reconnect after a cut took %v, want below the TTL %v (the term is resigned at once)", took, ttl)
	}
	requireNoKicks(t, c, "b1")
}
