package serve

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/botsettings"
	"github.com/botctl/botctl/pkg/clusterkey"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/fleet"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fleetCluster is two nodes (n1, n2) serving b1 from their files, on one
// etcd, one NATS and the simulator (bots b1, reg, enc: secrets s-<bot>).
type fleetCluster struct {
	sim   *wecomsim.Server
	cli   *clientv3.Client
	nodes []*runningNode

	mu   sync.Mutex
	logs [][]string // each node's log lines
}

// logged counts node i's log lines holding every one of parts.
func (c *fleetCluster) logged(i int, parts ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for _, l := range c.logs[i] {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			k++
		}
	}
	return k
}

// startFleet starts the nodes, node i with keys[i] as its cluster key
// (nil: none) and the demo's answers taking answerTime.
func startFleet(t *testing.T, answerTime time.Duration, keys ...*clusterkey.Key) *fleetCluster {
	t.Helper()
	sim, wecomURL := startSimBots(t, "b1", "reg", "enc")
	e, ns := startEtcd(t), startNATS(t)
	c := &fleetCluster{sim: sim, cli: etcdClient(t, e), logs: make([][]string, len(keys))}
	for i, k := range keys {
		cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
		cfg.NodeID = []string{"n1", "n2"}[i]
		cfg.DataDir = t.TempDir()
		cfg.Bots = []config.Bot{{ID: "b1", Secret: "s-b1"}}
		cfg.AI.Demo.AnswerTime = answerTime
		if k != nil {
			cfg.Secrets.KeyFile = k.File()
		}
		log := zerolog.New(lineWriter(func(l string) { c.mu.Lock(); c.logs[i] = append(c.logs[i], l); c.mu.Unlock() }))
		n, err := startNodeLogged(t, cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, n)
	}
	return c
}

func etcdClient(t *testing.T, e *infra.Etcd) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// add registers bot (secret s-<bot>) under k, as botctl bots add does.
func (c *fleetCluster) add(t *testing.T, k *clusterkey.Key, bot string) {
	t.Helper()
	b, err := fleet.New(k, bot, "", "", nil, config.Defaults().TopSettings(), []byte("s-"+bot), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Add(context.Background(), c.cli, botsettings.DefaultPrefix, b); err != nil {
		t.Fatal(err)
	}
}

// ask posts text to bot from ann and waits for its final answer.
func (c *fleetCluster) ask(t *testing.T, bot, text string) string {
	t.Helper()
	res, err := c.sim.PostMessage(wecomsim.MessageRequest{BotID: bot, UserID: "ann", Text: text})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	testwait.Eventually(t, time.Minute, bot+" answered "+text, func() bool {
		for _, e := range c.sim.Transcript(bot, "ann") {
			if e.From == "bot" && e.Finished && e.ReplyTo == res.MsgID {
				got = e.Content
				return true
			}
		}
		return false
	})
	return got
}

// leader is the node that leads bot now, or nil.
func (c *fleetCluster) leader(bot string) *runningNode {
	for _, n := range c.nodes {
		if n.Pusher(bot) != nil {
			return n
		}
	}
	return nil
}

// A bot added to the registry while two nodes run is campaigned for by
// both within 5 s, led, and answers; no node restarts.
func TestBotAddedAtRunTimeIsLed(t *testing.T) {
	t.Parallel()
	k := clusterKey(t, 1)
	c := startFleet(t, 10*time.Millisecond, k, k)
	// Its bots set override, written before the bot is added, applies.
	if _, err := botsettings.Put(context.Background(), c.cli, botsettings.DefaultPrefix, "reg", settings(t, "access: {unsupported_text: 'reg: text only'}"), config.Defaults().TopSettings(), 0); err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	c.add(t, k, "reg")
	testwait.Eventually(t, 5*time.Second, "both nodes campaigning for reg", func() bool {
		return c.nodes[0].Node.Node.Serves("reg") && c.nodes[1].Node.Node.Serves("reg")
	})
	t.Logf("both nodes campaign for reg %s after bots add", time.Since(added).Round(time.Millisecond))
	testwait.Eventually(t, time.Minute, "reg connected", func() bool { st, _ := c.sim.Stats("reg"); return st.Connected })
	t.Logf("reg led %s after bots add", time.Since(added).Round(time.Millisecond))
	if got := c.ask(t, "reg", "hello reg"); got == "" {
		t.Fatal("reg's answer is empty")
	}
	for _, n := range c.nodes {
		if got := n.bots.Rules("reg").Texts.Unsupported; got != "reg: text only" {
			t.Errorf("%s: reg's unsupported_text %q, want its override's", n.cfg.NodeID, got)
		}
	}
}

// Removing a bot while its answer is being written drains it: the
// answer is delivered in full (not closed with the handover note), then
// its connection is closed, no node campaigns for it, and its task
// record stays readable.
func TestBotRemovedIsDrained(t *testing.T) {
	t.Parallel()
	k := clusterKey(t, 1)
	c := startFleet(t, 3*time.Second, k, k)
	c.add(t, k, "reg")
	testwait.Eventually(t, time.Minute, "reg led", func() bool { return c.leader("reg") != nil })
	lead := c.leader("reg")
	res, err := c.sim.PostMessage(wecomsim.MessageRequest{BotID: "reg", UserID: "ann", Text: "a long one"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	testwait.Eventually(t, 30*time.Second, "the answer owed", func() bool {
		ids, _ := lead.Store.UndeliveredTasks(ctx, "reg")
		return len(ids) == 1
	})
	if _, err := fleet.Remove(ctx, c.cli, botsettings.DefaultPrefix, "reg"); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "no node serves reg", func() bool {
		return !c.nodes[0].Node.Node.Serves("reg") && !c.nodes[1].Node.Node.Serves("reg")
	})
	if st, _ := c.sim.Stats("reg"); st.Connected {
		t.Error("reg's connection is open after its removal")
	}
	var final string
	for _, e := range c.sim.Transcript("reg", "ann") {
		if e.From == "bot" && e.Finished && e.ReplyTo == res.MsgID {
			final = e.Content
		}
	}
	if final == "" || strings.Contains(final, lead.cfg.Push.HandoverNote) {
		t.Errorf("the answer in flight at the removal: %q, want it delivered in full", final)
	}
	recs := botRecords(t, lead, "reg")
	if len(recs) != 1 || recs[0].Delivery != task.Delivered {
		t.Errorf("reg's task records after the removal: %+v, want one, delivered", recs)
	}
	for _, n := range c.nodes {
		if st, ok := n.Node.Node.Info().Bots["reg"]; ok {
			t.Errorf("%s still lists reg (%s)", n.cfg.NodeID, st.State)
		}
	}
}

// botRecords are bot's task records, read as botctl tasks reads them.
func botRecords(t *testing.T, n *runningNode, bot string) []*task.Record {
	t.Helper()
	ctx := context.Background()
	keys, err := n.Store.Tasks().ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*task.Record
	for key := range keys.Keys() {
		r, _, err := task.Get(ctx, n.Store.Tasks(), key)
		if err == nil && r.Bot == bot {
			out = append(out, r)
		}
	}
	return out
}

// A node with another cluster key refuses the bot sealed under the
// cluster's key, naming its key file in its status (once in its log),
// and keeps serving its file's bots; the node with the key leads it.
func TestNodeWithAnotherKeyRefusesEncryptedBot(t *testing.T) {
	t.Parallel()
	k, other := clusterKey(t, 1), clusterKey(t, 9)
	c := startFleet(t, 10*time.Millisecond, k, other)
	c.add(t, k, "enc")
	var why string
	testwait.Eventually(t, 5*time.Second, "n2 refuses enc", func() bool {
		st, ok := c.nodes[1].Node.Node.Info().Bots["enc"]
		why = st.Reason
		return ok && st.State == node.StateRefused
	})
	if !strings.Contains(why, other.File()) || strings.Contains(why, "s-enc") {
		t.Errorf("n2's reason %q, want the key file %s named (and no secret)", why, other.File())
	}
	// A change of the record (its secret sealed again) is read again:
	// still refused, not logged again.
	since := c.nodes[1].Node.Node.Info().Bots["enc"].Since
	if _, err := fleet.RotateSecret(context.Background(), c.cli, botsettings.DefaultPrefix, k, "enc", []byte("s-enc"), time.Now()); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, "n2 refuses enc again", func() bool {
		st := c.nodes[1].Node.Node.Info().Bots["enc"]
		return st.State == node.StateRefused && st.Since.After(since)
	})
	if k := c.logged(1, "registered bot not served", `"bot":"enc"`, other.File()); k != 1 {
		t.Errorf("n2 logged its refusal of enc %d times, want once", k)
	}
	if k := c.logged(1, "s-enc"); k != 0 {
		t.Error("n2's log holds enc's secret")
	}
	testwait.Eventually(t, time.Minute, "enc led by n1", func() bool { return c.nodes[0].Pusher("enc") != nil })
	if got := c.ask(t, "enc", "hello enc"); got == "" {
		t.Fatal("enc's answer is empty")
	}
	if c.nodes[1].Node.Node.Serves("enc") {
		t.Error("n2 campaigns for enc")
	}
	// n2 serves its file's bot: it leads b1 once n1 stops.
	c.nodes[0].Stop()
	testwait.Eventually(t, time.Minute, "b1 led by n2", func() bool { return c.nodes[1].Pusher("b1") != nil })
	if got := c.ask(t, "b1", "hello b1"); got == "" {
		t.Fatal("b1's answer is empty")
	}
}

// rotate stores secret as bot's new one (as botctl bots rotate-secret
// does) and waits for the leader's outcome.
func (c *fleetCluster) rotate(t *testing.T, k *clusterkey.Key, bot, secret string) fleet.Bot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := fleet.RotateSecret(ctx, c.cli, botsettings.DefaultPrefix, k, bot, []byte(secret), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	out, err := fleet.AwaitRotation(ctx, c.cli, botsettings.DefaultPrefix, bot, b.Rev)
	if err != nil {
		t.Fatalf("rotation of %s not settled: %v (last %+v)", bot, err, out.Rotation)
	}
	return out
}

// rotate-secret with the secret WeCom now has is proved by the leader
// without a restart: its new connection replaces the old one (one kick,
// its own), and the bot answers. With a wrong secret, WeCom's refusal is
// recorded in the registry, the old secret restored there, and the
// connection held is kept (no kick): the bot answers on.
func TestRotateSecretAtRunTime(t *testing.T) {
	t.Parallel()
	k := clusterKey(t, 1)
	c := startFleet(t, 2*time.Second, k, k)
	c.add(t, k, "reg")
	testwait.Eventually(t, time.Minute, "reg led", func() bool { return c.leader("reg") != nil })
	lead := c.leader("reg")
	c.ask(t, "reg", "before")
	if err := c.sim.SetSecret("reg", "s2-reg"); err != nil {
		t.Fatal(err)
	}
	before, _ := c.sim.Stats("reg")
	// An answer being written while the secret is rotated: its stream is
	// closed with the handover note, and the answer follows by push.
	if _, err := c.sim.PostMessage(wecomsim.MessageRequest{BotID: "reg", UserID: "bob", Text: "in flight"}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "the answer owed", func() bool {
		ids, _ := lead.Store.UndeliveredTasks(context.Background(), "reg")
		return len(ids) == 1
	})

	b := c.rotate(t, k, "reg", "s2-reg")
	if b.Rotation.State != fleet.RotationProved {
		t.Fatalf("rotation to the right secret: %+v, want proved", b.Rotation)
	}
	st, _ := c.sim.Stats("reg")
	if !st.Connected || st.Kicks != before.Kicks+1 || st.AuthFailures != before.AuthFailures {
		t.Errorf("after the rotation: connected %v, kicks %d (before %d), auth failures %d, want one kick by the new connection", st.Connected, st.Kicks, before.Kicks, st.AuthFailures)
	}
	c.ask(t, "reg", "after the rotation")
	testwait.Eventually(t, time.Minute, "every answer delivered", func() bool {
		for _, r := range botRecords(t, lead, "reg") {
			if r.Delivery != task.Delivered {
				return false
			}
		}
		return true
	})
	if recs := botRecords(t, lead, "reg"); len(recs) != 3 {
		t.Errorf("%d task records of reg, want 3", len(recs))
	}

	b = c.rotate(t, k, "reg", "not-the-secret")
	if b.Rotation.State != fleet.RotationRefused || !strings.Contains(b.Rotation.Error, "authentication failed: errcode") {
		t.Fatalf("rotation to a wrong secret: %+v, want refused with WeCom's error", b.Rotation)
	}
	if strings.Contains(b.Rotation.Error, "not-the-secret") {
		t.Error("the refusal holds the secret")
	}
	if s, err := b.OpenSecret(k); err != nil || s != "s2-reg" {
		t.Errorf("the registry's secret after the refusal: %v, want the old one kept", err)
	}
	after, _ := c.sim.Stats("reg")
	if !after.Connected || after.Kicks != st.Kicks || after.AuthFailures != st.AuthFailures+1 {
		t.Errorf("after the refused rotation: connected %v, kicks %d (before %d), auth failures %d: want the holder kept", after.Connected, after.Kicks, st.Kicks, after.AuthFailures)
	}
	c.ask(t, "reg", "after the refusal")
}
