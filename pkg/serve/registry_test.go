package serve

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/botsettings"
	"github.com/botctl/botctl/pkg/clusterkey"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/fleet"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// clusterKey writes a cluster key file made of seed and loads it.
func clusterKey(t *testing.T, seed byte) *clusterkey.Key {
	t.Helper()
	b := make([]byte, clusterkey.Size)
	for i := range b {
		b[i] = seed + byte(i)
	}
	p := filepath.Join(t.TempDir(), "cluster.key")
	if err := os.WriteFile(p, []byte(hex.EncodeToString(b)), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := clusterkey.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A node serves, beside the file's bots, the registry's bots whose secret
// opens under its cluster key, found at its start; one sealed under
// another key is not served, the log naming both keys and the key file
// (never a secret), and the others are served.
func TestRegisteredBotsServedAtStart(t *testing.T) {
	t.Parallel()
	sim, wecomURL := startSimBots(t, "b1", "reg", "wrong")
	e, ns := startEtcd(t), startNATS(t)
	k, other := clusterKey(t, 1), clusterKey(t, 9)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	top := config.Defaults().TopSettings()
	for _, r := range []struct {
		k   *clusterkey.Key
		bot string
	}{{k, "reg"}, {other, "wrong"}} {
		b, err := fleet.New(r.k, r.bot, "", "", nil, top, []byte("s-"+r.bot), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fleet.Add(ctx, cli, botsettings.DefaultPrefix, b); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	var lines []string
	log := zerolog.New(lineWriter(func(l string) { mu.Lock(); lines = append(lines, l); mu.Unlock() }))
	cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
	cfg.Bots = []config.Bot{{ID: "b1", Secret: "s-b1"}}
	cfg.Secrets.KeyFile = k.File()
	n, err := startNodeLogged(t, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"b1", "reg"} {
		testwait.Eventually(t, time.Minute, b+" connected", func() bool { st, _ := sim.Stats(b); return st.Connected })
		if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: b, UserID: "ann", Text: "hello " + b}); err != nil {
			t.Fatal(err)
		}
		testwait.Eventually(t, time.Minute, b+" answered", func() bool { return lastFinished(sim, b, "ann") != "" })
	}
	bots := n.Node.Node.Info().Bots
	if st := bots["wrong"]; st.State != node.StateRefused || len(bots) != 3 || n.Node.Node.Serves("wrong") {
		t.Errorf("the node's bots: %v, want b1 and reg served, wrong refused", bots)
	}
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(lines, "\n")
	if !strings.Contains(all, "encrypted under key "+other.ID()+", this node has key "+k.ID()+" (secrets.key_file "+k.File()+")") {
		t.Errorf("no log line names the keys and the key file:\n%s", all)
	}
	if strings.Contains(all, "s-wrong") || strings.Contains(all, "s-reg") {
		t.Errorf("a secret is logged")
	}
}
