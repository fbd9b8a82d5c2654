package health_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/faultproxy"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/wecom"
)

// throughProxy puts a TCP proxy between the node and the simulator, so a
// test can make the link dead the way a lost route does: no FIN, no RST,
// bytes written into the void.
func throughProxy(p **faultproxy.Proxy) func(e *env) {
	return func(e *env) {
		host := strings.TrimSuffix(strings.TrimPrefix(e.wsURL, "ws://"), "/")
		px, err := faultproxy.New("127.0.0.1:0", host)
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { px.Close() })
		e.wsURL = "ws://" + px.Addr() + "/"
		*p = px
	}
}

// waitDetected waits for the bot's first outage incident to be open and
// returns it.
func (e *env) waitDetected() incident.Incident {
	e.t.Helper()
	var got incident.Incident
	testwait.Eventually(e.t, waitLong, "an outage incident", func() bool {
		for _, i := range e.incidents() {
			if i.Kind == incident.Outage {
				got = i
				return true
			}
		}
		return false
	})
	return got
}

// A link blackholed on the network, heartbeats an hour apart: the bot's
// next frame goes unacked, the probe it triggers goes unacked too, and the
// connection is closed and replaced once the route is back. The socket
// never says a word; only the probe finds it.
func TestBlackholedLinkIsFoundByAProbe(t *testing.T) {
	var px *faultproxy.Proxy
	e := start(t, options{before: throughProxy(&px), node: func(c *node.Config) { c.WeCom.HeartbeatInterval = time.Hour }})
	e.waitOnline()
	conns := e.stats().Connections
	fault := time.Now()
	px.Blackhole()
	if err := e.current().SendMarkdown(context.Background(), "alice", wecom.ChatTypeSingle, "hello"); err == nil {
		t.Fatal("a push acked through a blackholed link")
	}
	open := e.waitDetected()
	if open.Signal != incident.SignalOutbound {
		t.Fatalf("detected by %q, want the outbound signal:\n%s", open.Signal, dump(open))
	}
	logFound(t, open, fault)
	px.Heal()
	i := e.waitClosed(1)
	if !strings.Contains(i.Reason, "probe not acked") {
		t.Fatalf("incident not decided by the probe:\n%s", dump(i))
	}
	if e.stats().Connections <= conns {
		t.Fatal("no new connection after the route came back")
	}
	if i.Method != incident.MethodAuto {
		t.Fatalf("method %q, want auto:\n%s", i.Method, dump(i))
	}
}

// The same dead link on an idle bot: nothing is sent, so only the silence
// (against a baseline that expects traffic) raises the suspicion; the
// probe it triggers goes unacked, so it is a dead link (signal probe), not
// a deaf connection, and a new connection ends it even if no user writes
// for hours (a silence incident would wait for a callback).
func TestBlackholedIdleBotIsFoundBySilence(t *testing.T) {
	var px *faultproxy.Proxy
	e := start(t, options{
		before: func(e *env) { seedBaseline(e); throughProxy(&px)(e) },
		health: silenceLimits,
		node:   func(c *node.Config) { c.WeCom.HeartbeatInterval = time.Hour },
	})
	e.waitOnline()
	conns := e.stats().Connections
	fault := time.Now()
	px.Blackhole()
	open := e.waitDetected()
	if open.Signal != incident.SignalProbe || !strings.Contains(open.Reason, "no callback for") {
		t.Fatalf("detected by %q, want the probe a silence triggered:\n%s", open.Signal, dump(open))
	}
	logFound(t, open, fault)
	px.Heal()
	t.Cleanup(func() {
		if t.Failed() {
			for _, i := range e.incidents() {
				t.Logf("incident:\n%s", dump(i))
			}
			t.Logf("record: %+v\nsim: %+v", e.record(), e.stats())
		}
	})
	i := e.waitClosed(1)
	if e.stats().Connections <= conns {
		t.Fatalf("no new connection after the route came back:\n%s", dump(i))
	}
	if r := e.record(); r.State != health.Online {
		t.Fatalf("health %q after recovery", r.State)
	}
}

// logFound logs when inc was detected after fault. How soon is decided by
// the monitor's watch, and asserted there (TestDecide, TestProbed): a
// test over real servers asserts what was found, not how fast.
func logFound(t *testing.T, inc incident.Incident, fault time.Time) {
	t.Helper()
	t.Logf("found %s after the fault (T1 %s)", inc.Detected.Sub(fault).Round(time.Millisecond), inc.T1().Round(time.Millisecond))
}

// A dead link on an idle bot with no baseline (nothing sent, no silence
// alarm possible): the first heartbeat whose ack is late makes the
// monitor probe, and the unacked probe closes the connection (its reason
// says so), instead of the connection's own limit of missed heartbeats.
// That the late heartbeat is probed at once, once, is TestDecide's.
func TestBlackholedIdleBotIsFoundByALateHeartbeat(t *testing.T) {
	var px *faultproxy.Proxy
	e := start(t, options{before: throughProxy(&px), node: func(c *node.Config) { c.WeCom.HeartbeatInterval = 3 * time.Second }})
	e.waitOnline()
	conns := e.stats().Connections
	fault := time.Now()
	px.Blackhole()
	open := e.waitDetected()
	if open.Signal != incident.SignalProbe || !strings.Contains(open.Reason, "heartbeat") || !strings.Contains(open.Reason, "probe not acked") {
		t.Fatalf("not found by the probe a late heartbeat triggered:\n%s", dump(open))
	}
	logFound(t, open, fault)
	px.Heal()
	i := e.waitClosed(1)
	if e.stats().Connections <= conns {
		t.Fatalf("no new connection after the route came back:\n%s", dump(i))
	}
}
