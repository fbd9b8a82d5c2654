package alert

import (
	"context"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/incident"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func startEtcd(t *testing.T) string {
	t.Helper()
	addr, err := infra.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := infra.StartEtcd(ctx, infra.EtcdConfig{DataDir: t.TempDir(), ClientAddr: addr, UnsafeNoFsync: true, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return addr
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

// Two alerters campaign on one etcd: only the leader sends; when its
// context ends, the other takes over and sends what comes next.
func TestRunElectedOneSenderAndTakeover(t *testing.T) {
	addr := startEtcd(t)
	f := newFixture(t)
	type member struct {
		rcv    *receiver
		cancel context.CancelFunc
		done   chan error
	}
	var ms [2]*member
	for k, node := range []string{"n1", "n2"} {
		m := &member{rcv: newReceiver(t), done: make(chan error, 1)}
		cfg := f.config(t)
		cfg.NodeID, cfg.Sinks = node, []Sink{NewWebhook(m.rcv.srv.URL)}
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

	first := func(bot string) (leader, other *member) {
		f.open(t, bot, incident.SignalAuth, incident.Human)
		select {
		case a := <-ms[0].rcv.ch:
			leader, other = ms[0], ms[1]
			if a.Instances[0].Bot != bot {
				t.Fatalf("alert %+v", a)
			}
		case a := <-ms[1].rcv.ch:
			leader, other = ms[1], ms[0]
			if a.Instances[0].Bot != bot {
				t.Fatalf("alert %+v", a)
			}
		case <-time.After(wait):
			t.Fatalf("no alert for %s from either alerter", bot)
		}
		return leader, other
	}
	leader, other := first("b1")
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
	next, _ := first("b2")
	if next != other {
		t.Fatal("the stopped leader still sends")
	}
	f.rcv = other.rcv
	f.barrier(t)
	if n := leader.rcv.hits.Load(); n != 2 {
		t.Fatalf("the old leader's receiver got %d alerts, want 2 (b1 and the barrier)", n)
	}
}
