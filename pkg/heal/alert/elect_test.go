package alert

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func startEtcd(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, cfg, err := infra.StartEtcdOnFreePorts(ctx, infra.EtcdConfig{DataDir: t.TempDir(), UnsafeNoFsync: true, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return cfg.ClientAddr
}

func etcdClient(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

type member struct {
	rcv    *receiver
	log    *testenv.LogBuffer
	cancel context.CancelFunc
	done   chan error
}

// members starts two alerters (n1, n2) under RunElected on one election.
func members(t *testing.T, f *fixture, addr string) [2]*member {
	var ms [2]*member
	for k, node := range []string{"n1", "n2"} {
		m := &member{rcv: newReceiver(t), log: &testenv.LogBuffer{}, done: make(chan error, 1)}
		cfg := f.config(t)
		cfg.NodeID, cfg.Sinks = node, []Sink{NewWebhook(m.rcv.srv.URL)}
		cfg.Logger = zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), m.log))
		a, err := New(f.store, cfg)
		if err != nil {
			t.Fatal(err)
		}
		cli := etcdClient(t, addr)
		ctx, cancel := context.WithCancel(context.Background())
		m.cancel = cancel
		go func() { m.done <- RunElected(ctx, cli, "/test/alerter", node, a) }()
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-m.done:
				if err != nil {
					t.Errorf("RunElected %s: %v", node, err)
				}
			case <-time.After(wait):
				t.Errorf("RunElected %s still running", node)
			}
		})
		ms[k] = m
	}
	return ms
}

// sentBy opens a human incident of bot and returns the member whose
// receiver gets its alert, and the other one.
func sentBy(t *testing.T, f *fixture, ms [2]*member, bot string) (leader, other *member) {
	t.Helper()
	f.open(t, bot, incident.SignalAuth, incident.Human)
	var a Alert
	select {
	case a = <-ms[0].rcv.ch:
		leader, other = ms[0], ms[1]
	case a = <-ms[1].rcv.ch:
		leader, other = ms[1], ms[0]
	case <-time.After(wait):
		t.Fatalf("no alert for %s from either alerter", bot)
	}
	if a.Kind != KindOpen || a.Instances[0].Bot != bot {
		t.Fatalf("alert %+v, want the open of %s", a, bot)
	}
	return leader, other
}

// Two alerters campaign on one etcd: only the leader sends; when its
// context ends, the other takes over and sends what comes next.
func TestRunElectedOneSenderAndTakeover(t *testing.T) {
	f := newFixture(t)
	ms := members(t, f, startEtcd(t))
	leader, other := sentBy(t, f, ms, "b1")
	f.rcv = leader.rcv
	f.barrier(t)
	if n := other.rcv.hits.Load(); n != 0 {
		t.Fatalf("the follower sent %d alerts", n)
	}

	// The leader's node stops: the other one leads and sends.
	leader.cancel()
	select {
	case err := <-leader.done:
		if err != nil {
			t.Fatal(err)
		}
		leader.done <- nil // for the cleanup
	case <-time.After(wait):
		t.Fatal("RunElected did not return after cancel")
	}
	if next, _ := sentBy(t, f, ms, "b2"); next != other {
		t.Fatal("the stopped leader still sends")
	}
	f.rcv = other.rcv
	f.barrier(t)
	if n := leader.rcv.hits.Load(); n != 2 {
		t.Fatalf("the old leader's receiver got %d alerts, want 2 (b1 and the barrier)", n)
	}
}

// The leader's etcd session is lost (its lease revoked, as when it
// expires): its term ends, the other alerter leads, and the old one
// campaigns again as a follower.
func TestRunElectedSessionLostEndsTerm(t *testing.T) {
	addr := startEtcd(t)
	f := newFixture(t)
	ms := members(t, f, addr)
	leader, other := sentBy(t, f, ms, "b1")

	admin := etcdClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := admin.Get(ctx, "/test/alerter/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("leader key: %v %v", resp, err)
	}
	if _, err := admin.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	// The old leader's keepalive learns it within a third of the TTL.
	for !strings.Contains(leader.log.String(), "alerter leadership over") {
		select {
		case <-ctx.Done():
			t.Fatal("the leader's term did not end after its lease was revoked")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if next, _ := sentBy(t, f, ms, "b2"); next != other {
		t.Fatal("the alerter whose session was lost still sends")
	}
	if n := leader.rcv.hits.Load(); n != 1 {
		t.Fatalf("the old leader's receiver got %d alerts, want 1", n)
	}
}

// etcdErrors is a Metrics that sends each operation to its channel,
// dropping it when the channel is full.
type etcdErrors chan string

func (c etcdErrors) EtcdError(op string) {
	select {
	case c <- op:
	default:
	}
}

// RunElected's failed etcd requests reach Config.Metrics: here every
// session's lease grant fails (the client is closed), and each try is
// heard as alert_session until ctx ends.
func TestRunElectedCountsEtcdErrors(t *testing.T) {
	addr := startEtcd(t)
	f := newFixture(t)
	cli := etcdClient(t, addr)
	cli.Close()
	ops := make(chan string, 64)
	cfg := f.config(t)
	cfg.Metrics = etcdErrors(ops)
	a, err := New(f.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunElected(ctx, cli, "/test/alerter/", "n1", a) }()
	select {
	case op := <-ops:
		if op != "alert_session" {
			t.Fatalf("EtcdError heard %q, want alert_session", op)
		}
	case <-time.After(wait):
		t.Fatal("EtcdError heard nothing while every session failed")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunElected: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("RunElected did not end with its context")
	}
}
