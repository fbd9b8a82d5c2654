package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/botctl/botctl/pkg/bots"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/botsettings"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecomsim"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// unbuildable is an override whose backend no node of these tests can
// build: openai's key variable (OPENAI_API_KEY, the default) is unset.
const unbuildable = `{"ai": {"kind": "openai", "openai": {"model": "gpt-4o-mini"}}}`

// withoutOpenAIKey unsets OPENAI_API_KEY for the test.
func withoutOpenAIKey(t *testing.T) {
	t.Helper()
	t.Setenv("OPENAI_API_KEY", "") // restored when the test ends
	os.Unsetenv("OPENAI_API_KEY")
}

// putOverride stores doc as bot's override directly, past every check of
// botctl bots set (as an older botctl, or etcdctl, would), and returns
// its revision.
func putOverride(t *testing.T, cli *clientv3.Client, bot, doc string) int64 {
	t.Helper()
	resp, err := cli.Put(context.Background(), botsettings.Key(botsettings.DefaultPrefix, bot), doc)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// demoQuestion asks b1 as user and waits for the finished answer.
func demoQuestion(t *testing.T, sim *wecomsim.Server, user, text string) string {
	t.Helper()
	if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: user, Text: text}); err != nil {
		t.Fatal(err)
	}
	var got string
	testwait.Eventually(t, time.Minute, "b1 answered "+user, func() bool { got = lastFinished(sim, "b1", user); return got != "" })
	return got
}

// refusedConfig is a node's configuration whose b1 is the demo with two
// paragraphs (the file's settings).
func refusedConfig(t *testing.T, id, wecomURL string, e interface{ Endpoints() []string }, natsURL string) config.Config {
	t.Helper()
	cfg := config.Defaults()
	cfg.NodeID, cfg.DataDir = id, t.TempDir()
	cfg.WeCom.URL = wecomURL
	cfg.Bots = []config.Bot{{ID: "b1", Secret: "s1", Settings: settings(t, "ai: {kind: demo, demo: {paragraphs: 2, answer_time: 100ms}}")}}
	cfg.Election.TTL, cfg.Election.SafetyMargin = 3*time.Second, time.Second
	cfg.Etcd.Endpoints = e.Endpoints()
	cfg.NATS.URL = natsURL
	return cfg
}

// A node started while etcd holds an override of b1 whose backend cannot
// be built on it (the key variable unset) starts all the same, serves b1
// with the file's settings, and says the override is refused.
func TestNodeStartsWithAnOverrideItCannotBuild(t *testing.T) {
	withoutOpenAIKey(t)
	sim, wecomURL := startSimServer(t)
	e, ns := startEtcd(t), startNATS(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	rev := putOverride(t, cli, "b1", unbuildable)

	n, err := startNode(t, refusedConfig(t, "n1", "ws://"+wecomURL+"/", e, ns.ClientURL()))
	if err != nil {
		t.Fatalf("node with an unbuildable override in etcd did not start: %v", err)
	}
	testwait.Eventually(t, time.Minute, "b1 connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	if got, want := demoQuestion(t, sim, "ann", "how do tides work"), ai.DemoAnswer("how do tides work", 2, 0); got != want {
		t.Fatalf("b1 answered %q, want the file's demo answer %q", got, want)
	}
	checkRefusalShown(t, n, rev)

	// Cleared: the file's settings, and nothing refused any more.
	if err := botsettings.Delete(context.Background(), cli, botsettings.DefaultPrefix, "b1"); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "the refusal gone", func() bool { return n.bots.Refusal("b1").Rev == 0 })
	if rd := readyz(t, n); len(rd.Warnings) != 0 {
		t.Errorf("/readyz warnings with no override: %q", rd.Warnings)
	}
	if m := n.scrape(t); !strings.Contains(m, `botctl_bot_settings_refused{bot="b1"} 0`) {
		t.Errorf("/metrics with no override lacks botctl_bot_settings_refused{bot=\"b1\"} 0")
	}
}

// checkRefusalShown checks that n shows b1's override of revision rev as
// refused for OPENAI_API_KEY, b1 served with the file's settings: in GET
// /status, as a warning of /readyz (which stays ready) and in the metric.
func checkRefusalShown(t *testing.T, n *runningNode, rev int64) {
	t.Helper()
	id := n.cfg.NodeID
	if r := n.bots.Refusal("b1"); r.Rev != rev || !strings.Contains(r.Why, "OPENAI_API_KEY") {
		t.Errorf("%s: refusal %+v, want revision %d refused naming OPENAI_API_KEY", id, r, rev)
	}
	var st struct {
		Settings map[string]bots.View `json:"settings"`
	}
	getStatus(t, n, &st)
	if v := st.Settings["b1"]; v.Revision != 0 || v.Backend != config.AIKindDemo || v.RefusedRevision != rev || !strings.Contains(v.Refused, "OPENAI_API_KEY") {
		t.Errorf("%s: GET /status settings of b1: %+v, want the file's demo and revision %d refused", id, v, rev)
	}
	testwait.Eventually(t, time.Minute, id+" ready", func() bool { return readyz(t, n).Ready })
	rd := readyz(t, n)
	if len(rd.Warnings) != 1 || !strings.Contains(rd.Warnings[0], "bot b1:") || !strings.Contains(rd.Warnings[0], fmt.Sprintf("revision %d", rev)) ||
		!strings.Contains(rd.Warnings[0], "OPENAI_API_KEY") || !strings.Contains(rd.Warnings[0], "config file's settings") {
		t.Errorf("%s: /readyz warnings %q, want one naming b1, revision %d, OPENAI_API_KEY and the file's settings", id, rd.Warnings, rev)
	}
	if m := n.scrape(t); !strings.Contains(m, `botctl_bot_settings_refused{bot="b1"} 1`) {
		t.Errorf("%s: /metrics lacks botctl_bot_settings_refused{bot=\"b1\"} 1", id)
	}
}

// readyz reads n's GET /readyz.
func readyz(t *testing.T, n *runningNode) Readiness {
	t.Helper()
	resp, err := http.Get(n.API + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rd Readiness
	if err := json.NewDecoder(resp.Body).Decode(&rd); err != nil {
		t.Fatal(err)
	}
	if rd.Ready != (resp.StatusCode == http.StatusOK) {
		t.Errorf("/readyz: %s with ready %v", resp.Status, rd.Ready)
	}
	return rd
}

// getStatus reads n's GET /status into v.
func getStatus(t *testing.T, n *runningNode, v any) {
	t.Helper()
	token, err := n.cfg.API.CallerToken(n.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, n.API+"/status", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// A cluster whose override of b1 cannot be built on any node survives a
// restart of every node: each running node refuses the override, each
// node started again comes up with b1 on the file's settings, and b1
// keeps answering.
func TestEveryNodeRestartsWithAnOverrideNoneCanBuild(t *testing.T) {
	withoutOpenAIKey(t)
	sim, addr := startSimServer(t)
	e, ns := startEtcd(t), startNATS(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var cfgs []config.Config
	var nodes []*runningNode
	for _, id := range []string{"n1", "n2", "n3"} {
		cfg := refusedConfig(t, id, "ws://"+addr+"/", e, ns.ClientURL())
		n, err := startNode(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfgs, nodes = append(cfgs, cfg), append(nodes, n)
	}
	testwait.Eventually(t, time.Minute, "b1 connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	want := func(q string) string { return ai.DemoAnswer(q, 2, 0) }
	if got := demoQuestion(t, sim, "u1", "before the override"); got != want("before the override") {
		t.Fatalf("b1 answered %q before the override", got)
	}

	rev := putOverride(t, cli, "b1", unbuildable)
	for _, n := range nodes {
		testwait.Eventually(t, 30*time.Second, n.cfg.NodeID+" refused the override", func() bool { return n.bots.Refusal("b1").Rev == rev })
	}
	if got := demoQuestion(t, sim, "u2", "while it is refused"); got != want("while it is refused") {
		t.Fatalf("b1 answered %q while the override is refused", got)
	}

	// Every node stopped, then every node started again (a deploy, a
	// power cycle).
	for _, n := range nodes {
		if err := n.Stop(); err != nil {
			t.Fatalf("%s stopped with %v", n.cfg.NodeID, err)
		}
	}
	nodes = nodes[:0]
	for _, cfg := range cfgs {
		n, err := startNode(t, cfg)
		if err != nil {
			t.Fatalf("%s did not start again with the override in etcd: %v", cfg.NodeID, err)
		}
		nodes = append(nodes, n)
	}
	testwait.Eventually(t, time.Minute, "b1 connected again", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	if got := demoQuestion(t, sim, "u3", "after every node restarted"); got != want("after every node restarted") {
		t.Fatalf("b1 answered %q after the restart, want the file's demo answer", got)
	}
	for _, n := range nodes {
		checkRefusalShown(t, n, rev)
	}
}
