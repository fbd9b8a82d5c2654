package serve

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A node whose store cannot be declared stops and says why: Run returns
// the error. It must not keep campaigning for its bots while it waits for
// its election loop, which only ends with the process (a restart then
// found the spool still locked by the node that "stopped"; found by the
// chaos harness after a NATS server refused the consumer's declare).
func TestRunReturnsWhenTheStoreCannotBeDeclared(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	ns, err := infra.StartNATS(infra.NATSConfig{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()

	// The task stream exists with a retention the server cannot change
	// in place: the node's declare fails.
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if _, err := js.CreateStream(sctx, natsjs.StreamConfig{Name: "BOTCTL_TASKS", Subjects: []string{"botctl.elsewhere.>"}, Retention: natsjs.LimitsPolicy}); err != nil {
		t.Fatal(err)
	}

	cfg := config.Defaults()
	cfg.NodeID, cfg.DataDir = "n1", filepath.Join(t.TempDir(), "n1")
	cfg.WeCom.URL = "ws://127.0.0.1:1/" // never reached
	cfg.Bots = []config.Bot{{ID: "b1", Secret: "s1"}}
	cfg.Election.TTL, cfg.Election.SafetyMargin = 3*time.Second, time.Second
	cfg.Etcd.Endpoints, cfg.NATS.URL = e.Endpoints(), ns.ClientURL()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Config: cfg, Etcd: cli, NATSURL: cfg.NATS.URL, Listener: ln, Logger: zerolog.Nop()})
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run returned nil; want the declare error")
		}
		t.Logf("Run: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		<-done
		t.Fatal("Run still running 60s after its store failed to declare (stopped only by cancelling its context)")
	}
}

// Nodes declare one after another: a second declareLock waits for the
// first to unlock (three nodes declaring a fresh R3 cluster at once
// timed out against each other for minutes; test/load's r3 smoke starts
// them together). Without etcd the node declares anyway.
func TestDeclareLockSerializes(t *testing.T) {
	t.Parallel()
	e := startEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	unlock := declareLock(ctx, cli, "", zerolog.Nop())
	second := make(chan func(), 1) // buffered: the goroutine ends even if the test has given up on it
	go func() { second <- declareLock(ctx, cli, "", zerolog.Nop()) }()
	select {
	case <-second:
		t.Fatal("a second node took the declare lock while the first held it")
	case <-time.After(500 * time.Millisecond):
	}
	// Another environment (prefix) is not held up.
	other := declareLock(ctx, cli, "staging", zerolog.Nop())
	other()
	unlock()
	select {
	case u := <-second:
		u()
	case <-time.After(30 * time.Second):
		t.Fatal("the second node did not get the lock once the first let go")
	}
	declareLock(ctx, nil, "", zerolog.Nop())() // no etcd: nothing to wait for
}

// A node of a fresh R3 deploy that starts before the third NATS server is
// up (or while one is down) waits for it, receiving into its spool: the
// server's 10005 "no suitable peers for placement" is not a configuration
// error (the load harness's R3 node died of it at start when the meta
// group had elected before the third server joined). The wait says what
// it waits for, and the declare succeeds once the server is up.
func TestDeclareWaitsForEnoughServersToPlaceReplicas(t *testing.T) {
	t.Parallel() // mostly waiting on time windows (quotas, elections, audits): beside the other long tests
	c := testenv.NewNATSCluster(t, 3)
	c.Start(t, 0)
	c.Start(t, 1)
	nc, err := nats.Connect(c.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	warned := make(chan string, 64)
	log := zerolog.New(lineWriter(func(line string) {
		if strings.Contains(line, "too few servers up") {
			select {
			case warned <- line:
			default:
			}
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		store *jetstream.Store
		err   error
	}
	done := make(chan result, 1)
	go func() {
		st, err := declare(ctx, nc, config.NATS{}, js, jetstream.Options{Replicas: 3}, 0, log)
		done <- result{st, err}
	}()
	select {
	case line := <-warned:
		t.Logf("warned: %s", line)
	case r := <-done:
		t.Fatalf("declare returned with 2 of 3 servers up (store %v, err %v); want it to wait", r.store != nil, r.err)
	case <-time.After(2 * time.Minute):
		t.Fatal("no warning about too few servers within 2m")
	}
	c.Start(t, 2)
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("declare after the third server started: %v", r.err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("declare did not succeed within 2m of the third server starting")
	}
}

// A cluster whose storage cannot set aside the media bound beside the
// reservation refuses the placement with 10005 ("no suitable peers for
// placement, insufficient storage"), the code of too few servers up: the
// declare fails at once, naming the key, instead of waiting for servers
// that are all up.
func TestDeclareFailsWhenTheClusterStorageIsTooSmall(t *testing.T) {
	t.Parallel()
	c := testenv.NewNATSCluster(t, 3)
	c.MaxStore = 64 << 20
	for i := range 3 {
		c.Start(t, i)
	}
	testenv.DeclareOnCluster(t, c.URLs(), jetstream.Options{Replicas: 3, MediaMaxBytes: 8 << 20, ReserveBytes: 8 << 20, Prefix: "small"})
	nc, err := nats.Connect(c.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = declare(ctx, nc, config.NATS{}, js, jetstream.Options{Replicas: 3, MediaMaxBytes: 16 << 20, ReserveBytes: 100 << 20}, 0, zerolog.Nop())
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "media.reserve_bytes") {
		t.Fatalf("declare of 100 MiB reserved on 64 MiB a server: %v (waited: %v), want an error at once naming media.reserve_bytes", err, ctx.Err())
	}
}

// lineWriter hands each write (one zerolog line) to f.
type lineWriter func(string)

func (w lineWriter) Write(p []byte) (int, error) { w(string(p)); return len(p), nil }
