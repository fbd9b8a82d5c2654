package serve

import (
	"context"
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
	if r := n.bots.refusal("b1"); r.rev != rev || !strings.Contains(r.why, "OPENAI_API_KEY") {
		t.Errorf("refusal %+v, want revision %d refused naming OPENAI_API_KEY", r, rev)
	}
}
