package infra

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

func TestEtcdPutGet(t *testing.T) {
	defer goleak.VerifyNone(t)

	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := StartEtcd(ctx, EtcdConfig{DataDir: t.TempDir(), ClientAddr: addr, UnsafeNoFsync: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if got, want := e.Endpoints(), []string{"http://" + addr}; len(got) != 1 || got[0] != want[0] {
		t.Fatalf("Endpoints() = %v, want %v", got, want)
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get k = %v, want v", resp.Kvs)
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	e.Close()
	e.Close() // twice is fine
}

func TestEtcdRefusesRandomPort(t *testing.T) {
	_, err := StartEtcd(context.Background(), EtcdConfig{DataDir: t.TempDir(), ClientAddr: "127.0.0.1:0"})
	if err == nil {
		t.Fatal("StartEtcd with port 0 succeeded, want an error")
	}
}

// A client port already taken is EADDRINUSE from StartEtcd. The port is
// one the test itself holds (a listener), not one picked free and left
// open: another process could take that one before the test's own
// member bound it, and the test failed for the wrong reason.
func TestEtcdPortTaken(t *testing.T) {
	defer goleak.VerifyNone(t)
	held := holdPort(t)
	e, err := StartEtcd(context.Background(), EtcdConfig{DataDir: t.TempDir(), ClientAddr: held.Addr().String(), UnsafeNoFsync: true, Logger: zerolog.Nop()})
	if err == nil {
		e.Close()
		t.Fatal("etcd on a client port taken started, want an error")
	}
	// StartEtcdOnFreePorts tries other ports on exactly this error.
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), held.Addr().String()) {
		t.Fatalf("error %v is not EADDRINUSE on %s", err, held.Addr())
	}
	t.Logf("error (expected): %v", err)
}

// StartEtcdOnFreePorts picks two ports of its own, and the member serves
// on the client one it reports.
func TestEtcdOnFreePorts(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, cfg, err := StartEtcdOnFreePorts(ctx, EtcdConfig{DataDir: t.TempDir(), ClientAddr: "ignored", UnsafeNoFsync: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if cfg.ClientAddr == "ignored" || cfg.PeerAddr == "" || cfg.ClientAddr == cfg.PeerAddr {
		t.Fatalf("picked client %q peer %q, want two ports", cfg.ClientAddr, cfg.PeerAddr)
	}
	if got := e.Endpoints(); len(got) != 1 || got[0] != "http://"+cfg.ClientAddr {
		t.Fatalf("endpoints %v, want http://%s", got, cfg.ClientAddr)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
}

// A picked port another process holds (EADDRINUSE at etcd's bind) makes
// StartEtcdOnPicked pick again, and the member starts on the new ports.
func TestEtcdOnPickedRetriesATakenPort(t *testing.T) {
	defer goleak.VerifyNone(t)
	held := holdPort(t)
	picks := 0
	pick := func(n int) ([]string, error) {
		picks++
		addrs, err := FreeAddrs(n)
		if picks == 1 && err == nil {
			addrs[0] = held.Addr().String() // taken between the pick and the bind
		}
		return addrs, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, cfg, err := StartEtcdOnPicked(ctx, EtcdConfig{DataDir: t.TempDir(), UnsafeNoFsync: true, Logger: zerolog.Nop()}, pick)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if picks != 2 || cfg.ClientAddr == held.Addr().String() {
		t.Fatalf("%d picks, client %s (held: %s), want a second pick", picks, cfg.ClientAddr, held.Addr())
	}
}

// StartEtcd picks the peer port itself when the config gives none (botctl
// infra, botctl serve's embedded etcd given a client port): a pick another
// process took before etcd bound it is picked again, not a failed start.
func TestEtcdPicksThePeerAgainWhenTaken(t *testing.T) {
	defer goleak.VerifyNone(t)
	held := holdPort(t)
	picks := 0
	pickPeer = func(host string) (string, error) {
		picks++
		if picks == 1 {
			return held.Addr().String(), nil // taken between the pick and the bind
		}
		return freeAddrOn(host)
	}
	defer func() { pickPeer = freeAddrOn }()
	client, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := StartEtcd(ctx, EtcdConfig{DataDir: t.TempDir(), ClientAddr: client, UnsafeNoFsync: true, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("start with the first peer pick taken: %v", err)
	}
	defer e.Close()
	if picks != 2 {
		t.Fatalf("%d peer picks, want 2", picks)
	}
}

// holdPort listens on a loopback port until the test ends: a port another
// process took between a pick and etcd's bind.
func holdPort(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestFreeAddrsBelowTheEphemeralRange(t *testing.T) {
	start := ephemeralStart()
	addrs, err := FreeAddrs(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s twice in %v", a, addrs)
		}
		seen[a] = true
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if start-minPickedPort >= 1000 && (port < minPickedPort || port >= start) {
			t.Fatalf("port %d outside [%d, %d)", port, minPickedPort, start)
		}
		l, err := net.Listen("tcp", a) // free again once returned
		if err != nil {
			t.Fatalf("listen on %s: %v", a, err)
		}
		l.Close()
	}
}

func TestNATSJetStream(t *testing.T) {
	defer goleak.VerifyNone(t)

	n, err := StartNATS(NATSConfig{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	nc, err := nats.Connect(n.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(ctx, "t.a", []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stream != "T" || ack.Sequence != 1 {
		t.Fatalf("ack = %+v, want stream T seq 1", ack)
	}
	msg, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if string(msg.Data) != "hello" {
		t.Fatalf("stored message = %q, want hello", msg.Data)
	}
	nc.Close()
	n.Close()
	n.Close() // twice is fine
}

func TestNATSFixedPort(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	n, err := StartNATS(NATSConfig{DataDir: t.TempDir(), Addr: addr, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if got, want := n.ClientURL(), "nats://"+addr; got != want {
		t.Fatalf("ClientURL() = %q, want %q", got, want)
	}
}

// The embedded server fsyncs every JetStream write unless told otherwise:
// nats-server's own 2-minute default loses acknowledged writes in a power
// cut (issue 25 item 9).
func TestNATSSyncsEveryWriteByDefault(t *testing.T) {
	n, err := StartNATS(NATSConfig{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if !n.SyncAlways() {
		t.Fatal("default embedded NATS: JetStream sync_interval is not \"always\"")
	}
	m, err := StartNATS(NATSConfig{DataDir: t.TempDir(), Addr: "127.0.0.1:0", SyncInterval: 2 * time.Minute, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.SyncAlways() {
		t.Fatal("SyncInterval 2m: JetStream still syncs every write")
	}
}
