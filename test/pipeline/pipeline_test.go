// Package pipeline tests the whole path in one process, on real embedded
// etcd and NATS and the WeCom simulator: callback → receipt → task record →
// worker → output bucket → pusher → what the user sees.
package pipeline

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/botctl/botctl/pkg/serve"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const waitLong = 60 * time.Second

type cluster struct {
	t       *testing.T
	etcd    *infra.Etcd
	etcdCfg infra.EtcdConfig // how etcd was started (restartEtcd)
	nats    *infra.NATS
	sim     *wecomsim.Server
	wsURL   string
	dir     string
	sweep   time.Duration // nodes' task sweep interval (0: task.SweepInterval)
	ackWait time.Duration // nodes' task ack wait (0: 3 s)
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := newClusterWithoutNATS(t)
	// restartNATS brings NATS back on the same port, so it comes from
	// FreeAddr, as etcd's do: in the ephemeral range (a port 0 listen's),
	// another process's listen on port 0 could be given it while NATS is
	// down, most likely when NATS had no clients at its close (no
	// TIME_WAIT keeps such a listen off it).
	addr, err := infra.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	n, err := infra.StartNATS(infra.NATSConfig{DataDir: filepath.Join(c.dir, "nats"), Addr: addr, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	c.nats = n
	return c
}

// newClusterWithoutNATS is etcd and the simulator; the test runs NATS
// (a cluster of its own) and starts nodes with startOn.
func newClusterWithoutNATS(t *testing.T) *cluster {
	t.Helper()
	dir := t.TempDir()
	// restartEtcd brings the same member back on the same ports, so they
	// come from FreeAddrs (below the ephemeral range: no connection takes
	// them while the member is stopped).
	e, ecfg, err := infra.StartEtcdOnPicked(context.Background(), infra.EtcdConfig{DataDir: filepath.Join(dir, "etcd"), Logger: zerolog.Nop()}, infra.FreeAddrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	sim := wecomsim.New(wecomsim.Config{Logger: zerolog.Nop()})
	sim.AddBot("b1", "s1")
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { sim.Close(); srv.Close() })
	return &cluster{t: t, etcd: e, etcdCfg: ecfg, sim: sim, wsURL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/", dir: dir}
}

type runningNode struct {
	node  *serve.Node
	api   string // the node API's base URL
	token string // its API token (generated in its data dir)
	stop  func()
}

func (c *cluster) start(id string, mutate func(*config.Config)) *runningNode {
	c.t.Helper()
	return c.startOn(id, c.nats.ClientURL(), mutate)
}

// startOn starts a node that reaches NATS at natsURL (a fault proxy of
// its own, to cut one node off while the others reach NATS) and returns
// once it is ready.
func (c *cluster) startOn(id, natsURL string, mutate func(*config.Config)) *runningNode {
	c.t.Helper()
	return c.launchOn(id, natsURL, mutate).ready(waitLong)
}

// launchedNode is a node launchOn started, not yet seen ready.
type launchedNode struct {
	c      *cluster
	id     string
	cfg    config.Config
	r      *runningNode // its node set by ready
	readyc chan *serve.Node
	done   chan error // Run's result, put back by whoever reads it
}

// launchOn starts a node as startOn does and returns at once: the node
// may become ready only after something the test does (NATS coming
// back), so the test waits for it with ready, on its own goroutine, from
// then on. The node is stopped when the test ends, ready or not.
func (c *cluster) launchOn(id, natsURL string, mutate func(*config.Config)) *launchedNode {
	c.t.Helper()
	cfg := config.Defaults()
	cfg.NodeID, cfg.DataDir = id, filepath.Join(c.dir, id)
	cfg.WeCom.URL = c.wsURL
	cfg.Bots = []config.Bot{{ID: "b1", Secret: "s1"}}
	// The election keeps production's TTL and safety margin (20 s, 5 s):
	// no test here waits for a lease to expire (a leader stops
	// gracefully and resigns), and etcd runs in this process, whose
	// lease renewals a loaded machine can hold up for seconds. A term
	// that ends mid-test is a failover the test is not about: the new
	// term pushes the answers that streamed under the old one, and what
	// is posted between the two connections never arrives.
	cfg.AI.Demo.AnswerTime = 500 * time.Millisecond
	if mutate != nil {
		mutate(&cfg)
	}
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
	ackWait := c.ackWait
	if ackWait == 0 {
		ackWait = 3 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	readyc := make(chan *serve.Node, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve.Run(ctx, serve.Options{Config: cfg, Etcd: cli, NATSURL: natsURL, Listener: ln,
			TaskAckWait: ackWait, SweepInterval: c.sweep, Logger: testLogger(c.t), Ready: func(n *serve.Node) { readyc <- n }})
	}()
	var once sync.Once
	r := &runningNode{api: "http://" + ln.Addr().String(), stop: func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				done <- err
			case <-time.After(waitLong):
				c.t.Error("node did not stop")
			}
			cli.Close()
		})
	}}
	// Stopped at the end even if never ready; once ready, ready registers
	// the stop again (a no-op the second time), so that it runs before the
	// cleanups of what the test started meanwhile (NATS brought back).
	c.t.Cleanup(r.stop)
	return &launchedNode{c: c, id: id, cfg: cfg, r: r, readyc: readyc, done: done}
}

// ready waits up to within, from now, for the node to be ready.
func (l *launchedNode) ready(within time.Duration) *runningNode {
	l.c.t.Helper()
	select {
	case l.r.node = <-l.readyc:
	case err := <-l.done:
		l.done <- err
		l.c.t.Fatalf("node %s: %v", l.id, err)
	case <-time.After(within):
		l.c.t.Fatalf("node %s not ready within %s", l.id, within)
	}
	token, err := l.cfg.API.CallerToken(l.cfg.DataDir)
	if err != nil {
		l.c.t.Fatal(err)
	}
	l.r.token = token
	l.c.t.Cleanup(l.r.stop)
	return l.r
}

// busyReplies counts the finished busy replies to msgid in user's chat.
func (c *cluster) busyReplies(user, msgid string) int {
	k := 0
	for _, m := range c.bot(user) {
		if m.ReplyTo == msgid && m.Finished && strings.Contains(m.Content, "还在处理中") {
			k++
		}
	}
	return k
}

// awaitBusyReplies waits, once some of user's busy replies were held back
// by the send budget, until every message of more has a busy reply.
func (c *cluster) awaitBusyReplies(n *runningNode, user string, more []wecomsim.MessageResult, within time.Duration) {
	c.t.Helper()
	testwait.Eventually(c.t, waitLong, "some busy replies held back", func() bool { return n.node.Access.Stats().Suppressed > 0 })
	deadline := time.Now().Add(within)
	for _, m := range more {
		for c.busyReplies(user, m.MsgID) == 0 {
			if time.Now().After(deadline) {
				c.t.Fatalf("message %s got no busy reply (held back %d): %+v", m.MsgID, n.node.Access.Stats().Suppressed, c.bot(user))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// restartNATS brings NATS back on the URL it had (same port, same data
// dir) after c.nats.Close().
func (c *cluster) restartNATS(url string) {
	c.t.Helper()
	port := strings.TrimPrefix(url[strings.LastIndex(url, ":"):], ":")
	restarted, err := infra.StartNATS(infra.NATSConfig{DataDir: filepath.Join(c.dir, "nats"), Addr: "127.0.0.1:" + port, Logger: zerolog.Nop()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(restarted.Close)
}

// restartEtcd brings etcd back, the same member on the same addresses
// and data, after c.etcd.Close().
func (c *cluster) restartEtcd() {
	c.t.Helper()
	e, err := infra.StartEtcd(context.Background(), c.etcdCfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(e.Close)
	c.etcd = e
}

func (c *cluster) post(user, text string) wecomsim.MessageResult {
	c.t.Helper()
	r, err := c.sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: user, Text: text})
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

func (c *cluster) bot(chat string) []wecomsim.TranscriptEntry {
	var out []wecomsim.TranscriptEntry
	for _, m := range c.sim.Transcript("b1", chat) {
		if m.From == "bot" {
			out = append(out, m)
		}
	}
	return out
}

func (c *cluster) connected() bool {
	s, _ := c.sim.Stats("b1")
	return s.Connected
}

func (c *cluster) record(n *runningNode, msgid string) *task.Record {
	r, _, err := task.Get(context.Background(), n.node.Store.Tasks(), task.ID("b1", msgid))
	if err != nil {
		return &task.Record{}
	}
	return r
}

func answered(entries []wecomsim.TranscriptEntry, question string) int {
	k := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Content, "You asked: "+question) && e.Finished && !cutShort(e) {
			k++
		}
	}
	return k
}

// cutShort: a stream closed before its answer was complete, with the
// note that the complete answer follows by push (push.handover_note when
// a stopping leader closed it, push.truncated_note at the window's end):
// not an answer of its own.
func cutShort(e wecomsim.TranscriptEntry) bool {
	return e.Kind == "stream" && (strings.Contains(e.Content, "完整回答稍后单独发送") || strings.Contains(e.Content, "完整内容稍后单独发送"))
}

func TestMessageToAnswer(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", nil)
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	sent := c.post("alice", "what is botctl?")
	testwait.Eventually(t, waitLong, "answer delivered", func() bool { return answered(c.bot("alice"), "what is botctl?") == 1 })
	r := c.record(n, sent.MsgID)
	testwait.Eventually(t, waitLong, "record delivered", func() bool { r = c.record(n, sent.MsgID); return r.Delivery == task.Delivered })
	if r.Exec != task.Succeeded || r.ReqID == "" || r.Chat != "alice" || r.Question != "what is botctl?" || r.Tier != "queue" {
		t.Fatalf("record = %+v", r)
	}
	// The transitions tell the story, each with a time and a reason. The
	// two dimensions move independently (the worker may start before the
	// receipt is recorded), but each in its own order.
	var exec, delivery []string
	for _, tr := range r.Transitions {
		if tr.At.IsZero() || tr.Reason == "" {
			t.Fatalf("transition without time or reason: %+v", tr)
		}
		if tr.Dim == "exec" {
			exec = append(exec, tr.To)
		} else {
			delivery = append(delivery, tr.To)
		}
	}
	if got := strings.Join(exec, " "); got != "running succeeded" {
		t.Fatalf("exec transitions %q", got)
	}
	if got := strings.Join(delivery, " "); got != "streaming delivered" {
		t.Fatalf("delivery transitions %q", got)
	}
	bot := c.bot("alice")
	if len(bot) != 1 || bot[0].Kind != "stream" || bot[0].ReplyTo != sent.MsgID {
		t.Fatalf("user sees %+v", bot)
	}
}

// A duplicate callback (same msgid) makes one task and one answer.
func TestDuplicateCallbackOneTask(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", nil)
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	first := c.post("alice", "once")
	if _, err := c.sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "alice", Text: "once", MsgID: first.MsgID}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitLong, "answered", func() bool { return answered(c.bot("alice"), "once") == 1 })
	time.Sleep(time.Second) // a second answer would follow within the demo's 0.5 s
	if k := answered(c.bot("alice"), "once"); k != 1 {
		t.Fatalf("answered %d times", k)
	}
	if s := n.node.Access.Stats(); s.Duplicates != 1 || s.Dispatched != 1 {
		t.Fatalf("access stats %+v", s)
	}
}

// A second question while the first runs is told to wait; it never runs
// anywhere (no fallback tier), and the first answer is unaffected.
func TestBusyConversationRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) { cfg.AI.Demo.AnswerTime = 3 * time.Second })
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	c.post("alice", "first")
	testwait.Eventually(t, waitLong, "first running", func() bool { return n.node.Dispatch.Stats().Queued == 1 })
	second := c.post("alice", "second")
	testwait.Eventually(t, waitLong, "busy reply", func() bool {
		for _, m := range c.bot("alice") {
			if strings.Contains(m.Content, "还在处理中") && m.ReplyTo == second.MsgID {
				return true
			}
		}
		return false
	})
	testwait.Eventually(t, waitLong, "first answered", func() bool { return answered(c.bot("alice"), "first") == 1 })
	if answered(c.bot("alice"), "second") != 0 {
		t.Fatal("the refused question was answered")
	}
	s := n.node.Dispatch.Stats()
	if s.Busy != 1 || s.Fixed != 0 || s.Local != 0 || len(s.Fallbacks) != 0 {
		t.Fatalf("dispatch stats %+v", s)
	}
	if r := c.record(n, second.MsgID); r.ID != "" {
		t.Fatalf("refused question has a task record: %+v", r)
	}
}

// A user who keeps writing while an answer runs spends the
// conversation's send budget on busy replies. Once it is low the reply is
// held back (the answer's final frame needs the rest), but never dropped:
// every held-back message gets its busy reply later, once, as the final
// frame of its own stream; and the quota is never exceeded.
func TestBusyRepliesPastTheBudgetArriveLaterOnce(t *testing.T) {
	t.Parallel() // mostly waiting on time windows (answers, quotas, TTLs): beside the other long tests
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) { cfg.AI.Demo.AnswerTime = 8 * time.Second })
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	c.post("alice", "first")
	testwait.Eventually(t, waitLong, "first running", func() bool { return n.node.Dispatch.Stats().Queued == 1 })
	var more []wecomsim.MessageResult
	for i := range 25 { // more than push.budget (20 a minute)
		more = append(more, c.post("alice", fmt.Sprintf("more %d", i)))
	}
	busyReplies := func(msgid string) int { return c.busyReplies("alice", msgid) }
	// Held-back replies wait for the budget's minute to roll over.
	c.awaitBusyReplies(n, "alice", more, 3*time.Minute)
	testwait.Eventually(t, waitLong, "first answered", func() bool { return answered(c.bot("alice"), "first") == 1 })
	time.Sleep(2 * time.Second) // a second reply would come now
	for _, m := range more {
		if k := busyReplies(m.MsgID); k != 1 {
			t.Fatalf("message %s got %d busy replies", m.MsgID, k)
		}
	}
	for i := range more {
		if q := fmt.Sprintf("more %d", i); answered(c.bot("alice"), q) != 0 {
			t.Fatalf("refused question %q was answered", q)
		}
	}
	if s, _ := c.sim.Stats("b1"); s.QuotaRejections != 0 {
		t.Fatalf("quota rejections %d", s.QuotaRejections)
	}
}

// NATS is down: the conversation's first message waits in the spool, so
// every later one is refused busy. Past the send budget a refusal is held
// back for the pusher, which needs its record, and JetStream takes no
// write: after refuseLater's patience the refusal is sent at once, over
// botctl's budget (chaos kill-nats-server lost three such refusals: the
// user saw nothing). Every message gets exactly one busy reply, and
// WeCom's quota holds.
func TestBusyRefusalThatCannotBeRecordedIsSentAnyway(t *testing.T) {
	t.Parallel() // mostly waiting on time windows (answers, quotas, TTLs): beside the other long tests
	c := newCluster(t)
	n := c.start("n1", nil)
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	testwait.Eventually(t, waitLong, "JetStream bound", func() bool { code, _ := ready(t, n.api); return code == http.StatusOK })
	url := c.nats.ClientURL()
	c.nats.Close()
	defer c.restartNATS(url)
	c.post("alice", "first")
	testwait.Eventually(t, waitLong, "first spooled", func() bool { return n.node.Dispatch.Stats().Spooled == 1 })
	var more []wecomsim.MessageResult
	for i := range 22 { // more than push.budget (20 a minute) less the receipt
		more = append(more, c.post("alice", fmt.Sprintf("more %d", i)))
	}
	busyReplies := func(msgid string) int { return c.busyReplies("alice", msgid) }
	c.awaitBusyReplies(n, "alice", more, 2*time.Minute)
	for _, m := range more {
		if k := busyReplies(m.MsgID); k != 1 {
			t.Fatalf("message %s got %d busy replies", m.MsgID, k)
		}
	}
	if s, _ := c.sim.Stats("b1"); s.QuotaRejections != 0 {
		t.Fatalf("quota rejections %d", s.QuotaRejections)
	}
}

// The network fails just as a busy reply is sent (CI lost one such reply
// when the old leader closed its connection on SIGTERM): the reply died
// with its connection, so the refusal is recorded, and the pusher sends
// it once the bot is connected again, once; the first answer is
// unaffected.
func TestBusyReplyCutOffByTheNetworkArrivesLater(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) { cfg.AI.Demo.AnswerTime = 8 * time.Second })
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	c.post("alice", "first")
	testwait.Eventually(t, waitLong, "first running", func() bool { return n.node.Dispatch.Stats().Queued == 1 })
	const cut = "m-busy-cut-off"
	if err := c.sim.Fault(wecomsim.FaultRequest{BotID: "b1", Action: wecomsim.FaultDropOnReply, MsgID: cut}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "alice", Text: "second", MsgID: cut}); err != nil || !r.Delivered {
		t.Fatalf("second: %+v, %v", r, err)
	}
	busy := func() int {
		k := 0
		for _, m := range c.bot("alice") {
			if m.Finished && strings.Contains(m.Content, "还在处理中") {
				k++
			}
		}
		return k
	}
	testwait.Eventually(t, waitLong, "the connection dropped as the busy reply was sent", func() bool {
		s, _ := c.sim.Stats("b1")
		return s.Drops == 1
	})
	testwait.Eventually(t, waitLong, "the busy reply delivered after all", func() bool { return busy() > 0 })
	testwait.Eventually(t, waitLong, "first answered", func() bool { return answered(c.bot("alice"), "first") == 1 })
	time.Sleep(2 * time.Second) // a second busy reply would come now
	if k := busy(); k != 1 {
		t.Fatalf("%d busy replies, want 1: %+v", k, c.bot("alice"))
	}
	if answered(c.bot("alice"), "second") != 0 {
		t.Fatal("the refused question was answered")
	}
}

// The leader dies mid-answer (no resign): the standby takes over, and the
// answer reaches the user once, completed by the new leader.
func TestLeaderKilledMidStream(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := c.start("a", func(cfg *config.Config) { cfg.AI.Demo.AnswerTime = 4 * time.Second })
	testwait.Eventually(t, waitLong, "a connected", c.connected)
	b := c.start("b", func(cfg *config.Config) { cfg.AI.Demo.AnswerTime = 4 * time.Second })
	sent := c.post("alice", "survive this")
	testwait.Eventually(t, waitLong, "streaming", func() bool { return c.record(a, sent.MsgID).Exec == task.Running })
	a.stop() // graceful here; the e2e suite covers kill -9
	testwait.Eventually(t, waitLong, "answered once", func() bool { return answered(c.bot("alice"), "survive this") >= 1 })
	testwait.Eventually(t, waitLong, "record delivered", func() bool { return c.record(b, sent.MsgID).Delivery == task.Delivered })
	time.Sleep(time.Second)
	if k := answered(c.bot("alice"), "survive this"); k != 1 {
		t.Fatalf("answered %d times: %+v", k, c.bot("alice"))
	}
	s, _ := c.sim.Stats("b1")
	if s.QuotaRejections != 0 {
		t.Fatalf("quota rejections %d", s.QuotaRejections)
	}
	// The new leader found the task through the undelivered index, and
	// delivery took it out.
	if ids, err := b.node.Store.UndeliveredTasks(context.Background(), "b1"); err != nil || len(ids) != 0 {
		t.Fatalf("undelivered index after delivery: %v %v", ids, err)
	}
}

// NATS down: what the leader receives is spooled, and forwarded when
// JetStream is back; the question is answered.
func TestNATSDownSpooledThenForwarded(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	natsURL := c.nats.ClientURL()
	n := c.start("n1", nil)
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	c.nats.Close()
	var sent []wecomsim.MessageResult
	for i := range 3 {
		sent = append(sent, c.post(fmt.Sprintf("u%d", i), fmt.Sprintf("during outage %d", i)))
	}
	deadline := time.Now().Add(waitLong)
	for n.node.Dispatch.Stats().Spooled != 3 {
		if time.Now().After(deadline) {
			s, _ := c.sim.Stats("b1")
			t.Fatalf("spooled never reached 3: dispatch %+v; node %+v; simulator %+v", n.node.Dispatch.Stats(), n.node.Node.Status(), s)
		}
		time.Sleep(25 * time.Millisecond)
	}
	if depth, err := n.node.Spool.Len(); err != nil || depth != 3 {
		t.Fatalf("spool depth %d (%v), want 3", depth, err)
	}
	// Read by this node: not missed, although JetStream cannot say so
	// (the health monitor must not take a NATS outage for a deaf WeCom
	// connection, nor the backfill answer these again).
	for _, m := range sent {
		if known, err := n.node.Access.Known(context.Background(), "b1", m.MsgID); !known {
			t.Fatalf("message %s read during the outage is not known (%v)", m.MsgID, err)
		}
	}
	// The conversation's spooled task holds it: a later question is told
	// to wait, as when the task is in the queue, and cannot overtake it.
	later := c.post("u0", "while the first waits")
	if got := c.replyTo("u0", later.MsgID); !strings.Contains(got, "上一个问题还在处理中") {
		t.Fatalf("a later message of a spooled conversation got %q, want the busy reply", got)
	}
	c.restartNATS(natsURL)
	for i := range 3 {
		q := fmt.Sprintf("during outage %d", i)
		user := fmt.Sprintf("u%d", i)
		deadline := time.Now().Add(waitLong)
		for answered(c.bot(user), q) != 1 {
			if time.Now().After(deadline) {
				p := n.node.Pusher("b1")
				var ps any
				if p != nil {
					ps = p.Stats()
				}
				t.Fatalf("no answer to %q: user sees %+v; record %+v; dispatch %+v; pusher %+v; node %+v",
					q, c.bot(user), c.record(n, sent[i].MsgID), n.node.Dispatch.Stats(), ps, n.node.Node.Status())
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
	testwait.Eventually(t, waitLong, "spool empty", func() bool { d, err := n.node.Spool.Len(); return err == nil && d == 0 })
	if r := c.record(n, later.MsgID); r.ID != "" {
		t.Fatalf("the busy message became a task: %+v", r)
	}
	t.Logf("node after the outage: %+v", n.node.Node.Status())
}

// A new leader does not spend the quota the previous one already spent:
// the old leader pushed most of several long answers, using up the
// conversations' budgets, and stopped; the new leader pushes the rest
// without a single 45009 (it counts the old leader's sends from the task
// records, and waits for them to leave WeCom's window).
func TestNewLeaderRespectsPreviousLeadersQuota(t *testing.T) {
	t.Parallel() // mostly waiting on time windows (answers, quotas, TTLs): beside the other long tests
	c := newCluster(t)
	long := func(cfg *config.Config) {
		cfg.AI.Demo.AnswerTime = 3 * time.Second
		cfg.AI.Demo.AnswerBytes = 500_000 // about 25 pushed parts: more than one budget
		cfg.Push.Budget = 28              // close to WeCom's 30, so a second leader's fresh budget would overrun it
	}
	a := c.start("a", long)
	testwait.Eventually(t, waitLong, "a connected", c.connected)
	b := c.start("b", long)
	users := []string{"u0", "u1", "u2"}
	var sent []wecomsim.MessageResult
	for _, u := range users {
		sent = append(sent, c.post(u, "tell me everything"))
	}
	// a streams, closes each stream and pushes parts until its budget runs out.
	testwait.Eventually(t, waitLong, "a pushing parts, budgets spent", func() bool {
		for _, m := range sent {
			if r := c.record(a, m.MsgID); r.PushedParts < 15 {
				return false
			}
		}
		return true
	})
	a.stop()
	deadline := time.Now().Add(3 * time.Minute) // the budget window must pass
	for _, m := range sent {
		for c.record(b, m.MsgID).Delivery != task.Delivered {
			if time.Now().After(deadline) {
				t.Fatalf("not delivered: %+v", c.record(b, m.MsgID))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if s, _ := c.sim.Stats("b1"); s.QuotaRejections != 0 {
		t.Fatalf("quota rejections %d after the handover", s.QuotaRejections)
	}
}

// NATS is down when the node starts: it still campaigns, holds the bot's
// connection and receives: the user gets the receipt, the task waits in
// the spool (the conversation busy meanwhile), and once NATS is back the
// node binds JetStream, forwards the spool and answers.
func TestNodeStartsAndReceivesWhileNATSDown(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	natsURL := c.nats.ClientURL()
	c.nats.Close()
	started := c.launchOn("n1", natsURL, nil) // ready once NATS is back
	testwait.Eventually(t, waitLong, "leader connected without NATS", c.connected)
	sent := c.post("alice", "asked during the outage")
	testwait.Eventually(t, waitLong, "receipt", func() bool {
		bot := c.bot("alice")
		return len(bot) > 0 && strings.Contains(bot[0].Content, "已收到")
	})
	later := c.post("alice", "and another")
	if got := c.replyTo("alice", later.MsgID); !strings.Contains(got, "上一个问题还在处理中") {
		t.Fatalf("second message while the first is spooled: %q", got)
	}
	c.restartNATS(natsURL)
	n := started.ready(2 * waitLong) // bound JetStream after NATS came back
	testwait.Eventually(t, waitLong, "answered", func() bool { return answered(c.bot("alice"), "asked during the outage") == 1 })
	if r := c.record(n, sent.MsgID); r.Exec != task.Succeeded {
		t.Fatalf("record = %+v", r)
	}
	if r := c.record(n, later.MsgID); r.ID != "" {
		t.Fatalf("the busy message became a task: %+v", r)
	}
}

// testLogger is the nodes' logger: none, unless BOTCTL_TEST_LOG is set:
// "1" logs every test's nodes to stderr, any other value is a regular
// expression of the tests whose nodes log (their lines name the test).
func testLogger(t *testing.T) zerolog.Logger {
	v := os.Getenv("BOTCTL_TEST_LOG")
	if v == "" {
		return zerolog.Nop()
	}
	if v != "1" {
		if ok, err := regexp.MatchString(v, t.Name()); err != nil || !ok {
			return zerolog.Nop()
		}
	}
	return zerolog.New(os.Stderr).With().Timestamp().Str("test", t.Name()).Logger()
}
