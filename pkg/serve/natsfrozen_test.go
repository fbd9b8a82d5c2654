package serve

import (
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/faultproxy"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/nats-io/nats.go"
)

// A NATS server that stops answering without closing the connection (a
// frozen process, a link that drops packets) is noticed within seconds
// by the pings (nats.ping_interval), not after nats.go's default of about
// four minutes, and the node reconnects once the server answers again.
func TestFrozenNATSServerIsNoticedWithinSeconds(t *testing.T) {
	t.Parallel()
	addr := startSim(t)
	e, ns := startEtcd(t), startNATS(t)
	proxy, err := faultproxy.New("127.0.0.1:0", strings.TrimPrefix(ns.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	cfg := nodeConfig(t, addr, e, "nats://"+proxy.Addr())
	cfg.NATS.PingInterval = time.Second
	rn, err := startNode(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	nc := rn.obs.nc
	if st := nc.Status(); st != nats.CONNECTED {
		t.Fatalf("NATS status %s after start, want CONNECTED", st)
	}
	proxy.Blackhole()
	frozen := time.Now()
	// About 3 s at a 1 s interval; 30 s is far below the 4 minutes of
	// nats.go's default and generous for a loaded machine.
	testwait.Eventually(t, 30*time.Second, "the node to notice the frozen server", func() bool {
		return nc.Status() != nats.CONNECTED
	})
	t.Logf("frozen server noticed after %s", time.Since(frozen).Round(100*time.Millisecond))
	proxy.Heal()
	testwait.Eventually(t, time.Minute, "the node to reconnect", func() bool { return nc.Status() == nats.CONNECTED })
}
