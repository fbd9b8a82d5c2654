package serve

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// A node runs on an etcd with client-cert auth and a NATS with TLS verify
// and a password, from the config's keys alone, declares its store under
// nats.prefix and nothing under the default prefix, and registers its API
// as https:// with the token asked.
func TestRunOverTLSWithPrefix(t *testing.T) {
	t.Parallel()
	sec := testenv.StartSecured(t)
	ca, e, ns := sec.CA, sec.Etcd, sec.NATS
	nodeCert, nodeKey := ca.Issue(t, "n1")
	sim := wecomsim.New(wecomsim.Config{Logger: zerolog.Nop()})
	if err := sim.AddBot("b1", "s1"); err != nil {
		t.Fatal(err)
	}
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go sim.Serve(sln)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sim.Shutdown(ctx)
	}()

	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := config.Defaults()
	cfg.NodeID, cfg.DataDir = "n1", filepath.Join(dir, "n1")
	cfg.WeCom.URL = "ws://" + sln.Addr().String() + "/"
	cfg.Bots = []config.Bot{{ID: "b1", Secret: "s1"}}
	cfg.Election.TTL, cfg.Election.SafetyMargin = 3*time.Second, time.Second
	cfg.Etcd.Endpoints, cfg.Etcd.CAFile, cfg.Etcd.CertFile, cfg.Etcd.KeyFile = e.Endpoints(), ca.CAFile, nodeCert, nodeKey
	cfg.NATS.URL, cfg.NATS.Prefix = ns.ClientURL(), "BOTCTL_STAGING"
	cfg.NATS.CAFile, cfg.NATS.CertFile, cfg.NATS.KeyFile = ca.CAFile, nodeCert, nodeKey
	cfg.NATS.User, cfg.NATS.PasswordFile = sec.NATSUser, write("nats.pw", sec.NATSPassword+"\n")
	cfg.API.TokenFile = write("api.token", "0123456789abcdef0123456789abcdef\n")
	cfg.API.CertFile, cfg.API.KeyFile, cfg.API.CAFile = nodeCert, nodeKey, ca.CAFile
	rn, err := startNode(t, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	n := rn.Node
	apiAddr := strings.TrimPrefix(rn.API, "http://")
	if got := n.Store.Names().TaskStream; got != "BOTCTL_STAGING_TASKS" {
		t.Fatalf("task stream %s, want BOTCTL_STAGING_TASKS", got)
	}
	if info := n.Node.Info(); info.Address != "https://"+apiAddr {
		t.Fatalf("registered address %q, want https://%s", info.Address, apiAddr)
	}
	natsOpts, err := cfg.NATS.Options()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(cfg.NATS.URL, natsOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if _, err := js.Stream(sctx, "BOTCTL_TASKS"); err == nil {
		t.Fatal("the node declared the default prefix's stream too")
	}
}
