package config

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/faultproxy"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"
)

// An etcd member that stops answering without closing the connection (a
// frozen process, a link that drops packets) is left by the client's
// keepalive in about EtcdKeepAliveTime + EtcdKeepAliveTimeout while a
// stream is open (as a node's lease keep-alive always is): without it the
// connection stays "ready" for as long as TCP keeps it, and every request
// on it waits for its own deadline.
func TestEtcdClientLeavesAFrozenMember(t *testing.T) {
	e := testenv.StartEtcd(t)
	proxy, err := faultproxy.New("127.0.0.1:0", strings.TrimPrefix(e.Endpoints()[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	cc, err := Etcd{DialTimeout: 5 * time.Second}.ClientConfig([]string{"http://" + proxy.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cli.Put(ctx, "/test/k", "v"); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	_ = cli.Watch(wctx, "/test/k") // an open stream, as a node's lease keep-alive is
	if st := cli.ActiveConnection().GetState(); st != connectivity.Ready {
		t.Fatalf("connection %s before the freeze, want READY", st)
	}
	proxy.Blackhole()
	frozen := time.Now()
	// About 15 s; a minute is generous for a loaded machine and far
	// below what TCP alone takes.
	testwait.Eventually(t, time.Minute, "the client to leave the frozen member", func() bool {
		return cli.ActiveConnection().GetState() != connectivity.Ready
	})
	t.Logf("frozen member left after %s", time.Since(frozen).Round(100*time.Millisecond))
	proxy.Heal()
	testwait.Eventually(t, time.Minute, "a request to succeed once the member answers again", func() bool {
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
		defer gcancel()
		_, err := cli.Get(gctx, "/test/k")
		return err == nil
	})
}
