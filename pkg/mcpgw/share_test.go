package mcpgw

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// When the holder asks WeCom again: no record, another term's, or half
// the MaxAge gone (30 minutes of the default hour), not a moment before.
func TestStale(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	rec := &Record{URL: "u", Term: 7, Fetched: t0, Expires: t0.Add(DefaultMaxAge)}
	for _, c := range []struct {
		name string
		rec  *Record
		term int64
		at   time.Duration
		want bool
	}{
		{"none", nil, 7, 0, true},
		{"just fetched", rec, 7, 0, false},
		{"a second before 30 minutes", rec, 7, 30*time.Minute - time.Second, false},
		{"30 minutes", rec, 7, 30 * time.Minute, true},
		{"expired", rec, 7, 2 * time.Hour, true},
		{"a previous leader's", rec, 8, 0, true},
	} {
		if got := stale(c.rec, c.term, t0.Add(c.at), DefaultMaxAge); got != c.want {
			t.Errorf("%s: stale %v, want %v", c.name, got, c.want)
		}
	}
}

// askingConn is a bot's connection that answers aibot_get_mcp_config
// with a new URL each time, and keeps the clock's time of each ask.
type askingConn struct {
	clk clock.PassiveClock
	mu  sync.Mutex
	at  []time.Time
}

func (c *askingConn) Do(ctx context.Context, cmd, reqID string, body any) (*wecom.Frame, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = append(c.at, c.clk.Now())
	raw, _ := json.Marshal(map[string]string{"url": fmt.Sprintf("http://wecom.test/mcp/msg?ask=%d", len(c.at))})
	return &wecom.Frame{Body: raw}, nil
}

func (c *askingConn) asks() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.at...)
}

// holderTerm is a leadership of bot in etcd: a key under a lease, its
// creation revision the term.
func holderTerm(t *testing.T, cli *clientv3.Client, bot, node string) Term {
	t.Helper()
	lease, err := cli.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	key := "/test-election/" + bot + "/" + node
	put, err := cli.Put(context.Background(), key, node, clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	return Term{Bot: bot, Key: key, Rev: put.Header.Revision, Lease: lease.ID}
}

// The holder's record is asked for again 30 minutes after WeCom gave
// it (on the fake clock: the ticker's step), and at once by the next
// leader, whose term the record is not.
func TestHoldRefreshesAfter30MinutesAndOnANewLeader(t *testing.T) {
	e := testenv.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	t0 := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	clk := fakeclock.New(t0)
	gateway := func(node string) *Gateway {
		return New(Options{Node: node, Etcd: cli, Allow: fixedAllow{"b1": {"msg/get_message"}}, Clock: clk, Logger: zerolog.Nop()})
	}
	reader := gateway("reader")
	shared := func() *Record {
		rec, _, err := reader.read(context.Background(), reader.keys.MCP("b1", "msg"))
		if err != nil {
			t.Logf("read the record: %v", err)
		}
		return rec
	}
	record := func() Record {
		t.Helper()
		rec := shared()
		if rec == nil {
			t.Fatal("no record")
		}
		return *rec
	}
	hold := func(g *Gateway, term Term, conn Conn) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); g.Hold(ctx, term, conn) }()
		return func() { cancel(); <-done }
	}

	term1 := holderTerm(t, cli, "b1", "n1")
	conn1 := &askingConn{clk: clk}
	stop1 := hold(gateway("n1"), term1, conn1)
	defer stop1()
	testwait.Eventually(t, time.Minute, "the first ask", func() bool { return len(conn1.asks()) == 1 })
	testwait.Eventually(t, time.Minute, "the URL shared", func() bool { return shared() != nil })
	if rec := record(); rec.Node != "n1" || rec.Term != term1.Rev || !rec.Fetched.Equal(t0) || !rec.Expires.Equal(t0.Add(DefaultMaxAge)) {
		t.Fatalf("record %+v", rec)
	}
	clk.AwaitWaiters(t, 1) // the holder's ticker
	clk.Step(30 * time.Minute)
	testwait.Eventually(t, time.Minute, "asked again at 30 minutes", func() bool { return len(conn1.asks()) == 2 })
	if at := conn1.asks()[1]; !at.Equal(t0.Add(30 * time.Minute)) {
		t.Fatalf("asked again at %v, want %v", at, t0.Add(30*time.Minute))
	}
	testwait.Eventually(t, time.Minute, "the new URL shared", func() bool {
		rec := shared()
		return rec != nil && rec.URL == "http://wecom.test/mcp/msg?ask=2"
	})
	if rec := record(); !rec.Fetched.Equal(t0.Add(30*time.Minute)) || !rec.Expires.Equal(t0.Add(90*time.Minute)) {
		t.Fatalf("refreshed record %+v", rec)
	}

	// The leader changes: n2's term asks at once, without a step, though
	// the record it finds is fresh.
	stop1()
	term2 := holderTerm(t, cli, "b1", "n2")
	conn2 := &askingConn{clk: clk}
	stop2 := hold(gateway("n2"), term2, conn2)
	defer stop2()
	testwait.Eventually(t, time.Minute, "the next leader's ask", func() bool { return len(conn2.asks()) == 1 })
	testwait.Eventually(t, time.Minute, "the next leader's URL shared", func() bool {
		rec := shared()
		return rec != nil && rec.Term == term2.Rev
	})
	if n := len(conn1.asks()); n != 2 {
		t.Fatalf("the first holder asked %d times, want 2", n)
	}
}
