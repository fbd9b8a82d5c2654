package pipeline

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/metrics"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads a node's /metrics and parses it as Prometheus does.
func scrape(t *testing.T, api string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := obsHTTP.Get(api + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value is the metric of fam whose labels include want (nil: no such
// series); a histogram's value is its sample count.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) *float64 {
	fam := fams[name]
	if fam == nil {
		return nil
	}
next:
	for _, m := range fam.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		var v float64
		switch {
		case m.Gauge != nil:
			v = m.Gauge.GetValue()
		case m.Counter != nil:
			v = m.Counter.GetValue()
		case m.Histogram != nil:
			v = float64(m.Histogram.GetSampleCount())
		}
		return &v
	}
	return nil
}

type readiness struct {
	Ready   bool              `json:"ready"`
	Etcd    string            `json:"etcd"`
	NATS    string            `json:"nats"`
	Bots    map[string]string `json:"bots"`
	Reasons []string          `json:"reasons"`
}

func ready(t *testing.T, api string) (int, readiness) {
	t.Helper()
	var r readiness
	resp, err := obsHTTP.Get(api + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, r
}

// A running node's /metrics parses, names what the issue asks for, and
// its values follow what happened: one term led, a message received,
// receipted, answered and pushed.
func TestMetricsScrape(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", nil)
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	c.post("alice", "metrics please")
	testwait.Eventually(t, waitLong, "answered", func() bool { return answered(c.bot("alice"), "metrics please") == 1 })
	metrics.AlertSent("webhook", "open", "human", true)

	// The answer's delivery is recorded just after WeCom's ack: wait for
	// the counter rather than assume it.
	var fams map[string]*dto.MetricFamily
	testwait.Eventually(t, waitLong, "delivery counted", func() bool {
		fams = scrape(t, n.api)
		v := value(fams, "botctl_pusher_events_total", map[string]string{"bot": "b1", "event": "delivered"})
		return v != nil && *v == 1
	})
	checks := []struct {
		name   string
		labels map[string]string
		ok     func(float64) bool
		want   string
	}{
		{"botctl_bot_leader", map[string]string{"bot": "b1"}, eq(1), "1"},
		{"botctl_bot_state", map[string]string{"bot": "b1", "state": "leader"}, eq(1), "1"},
		{"botctl_bot_state", map[string]string{"bot": "b1", "state": "standby"}, eq(0), "0"},
		{"botctl_bot_term", map[string]string{"bot": "b1"}, gt(0), "> 0"},
		{"botctl_leader_terms_total", map[string]string{"bot": "b1"}, eq(1), "1"},
		{"botctl_wecom_connected", map[string]string{"bot": "b1"}, eq(1), "1"},
		{"botctl_wecom_frames_in_total", map[string]string{"bot": "b1", "cmd": "aibot_msg_callback"}, eq(1), "1"},
		{"botctl_wecom_frames_out_total", map[string]string{"bot": "b1", "cmd": "aibot_respond_msg", "errcode": "0"}, gt(1), "> 1 (receipt and final)"},
		{"botctl_receipt_latency_seconds", map[string]string{"bot": "b1"}, eq(1), "1 observation"},
		{"botctl_push_lag_seconds", map[string]string{"bot": "b1"}, gt(0), "> 0 observations"},
		{"botctl_pusher_events_total", map[string]string{"bot": "b1", "event": "throttled"}, ge(0), "present"},
		{"botctl_inbound_total", map[string]string{"outcome": "received"}, eq(1), "1"},
		{"botctl_dispatch_total", map[string]string{"outcome": "queued"}, eq(1), "1"},
		{"botctl_worker_slots", nil, eq(float64(config.DeriveSlots(config.MachineMemory(), 0))), "worker.slots derived from this machine"},
		{"botctl_worker_slots_busy", nil, eq(0), "0"},
		{"botctl_queue_depth", map[string]string{"state": "pending"}, eq(0), "0"},
		{"botctl_queue_depth", map[string]string{"state": "ack_pending"}, eq(0), "0"},
		{"botctl_spool_depth", nil, eq(0), "0"},
		{"botctl_media_store_bytes", nil, ge(0), "present"},
		{"botctl_media_store_max_bytes", nil, eq(float64(config.DefaultMediaMaxStoreBytes)), "media.max_store_bytes"},
		{"botctl_incidents_open", map[string]string{"bot": "b1", "kind": "outage"}, eq(0), "0"},
		{"botctl_incidents_open", map[string]string{"bot": "b1", "kind": "data"}, eq(0), "0"},
		{"botctl_alerts_sent_total", map[string]string{"sink": "webhook", "kind": "open", "level": "human", "result": "ok"}, ge(1), ">= 1"},
		{"botctl_jetstream_bound", nil, eq(1), "1"},
		{"botctl_nats_connected", nil, eq(1), "1"},
		{"botctl_nats_reconnects_total", nil, eq(0), "0"},
	}
	for _, ck := range checks {
		v := value(fams, ck.name, ck.labels)
		switch {
		case v == nil:
			t.Errorf("%s%v: missing", ck.name, ck.labels)
		case !ck.ok(*v):
			t.Errorf("%s%v = %g, want %s", ck.name, ck.labels, *v, ck.want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("%s missing", name)
		}
	}
	if t.Failed() {
		var names []string
		for n := range fams {
			if strings.HasPrefix(n, "botctl_") {
				names = append(names, n)
			}
		}
		t.Logf("families: %v", names)
	}
}

// Mid-answer, botctl_tasks shows the task running (and its stream open)
// and the worker's slot busy; a conversation out of send budget has its
// next frame deferred, counted as pusher_events_total{event="throttled"}.
// push.budget 1: the receipt spends the minute's only send, so the final
// frame, due when the answer is done, waits (a minute, which this test
// does not wait for).
func TestMetricsRunningTaskAndThrottled(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) {
		cfg.Push.Budget = 1
		cfg.AI.Demo.AnswerTime = 8 * time.Second // long enough to be seen running
	})
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	sent := c.post("alice", "a long answer please")
	testwait.Eventually(t, waitLong, "the task running", func() bool { return c.record(n, sent.MsgID).Exec == task.Running })

	// botctl_tasks is read from the undelivered index at most every 10 s; the
	// first scrape reads it now, while the answer has seconds to go.
	running := map[string]string{"bot": "b1", "exec": "running", "delivery": "streaming"}
	testwait.Eventually(t, waitLong, "botctl_tasks shows the task running", func() bool {
		fams := scrape(t, n.api)
		v := value(fams, "botctl_tasks", running)
		return v != nil && *v == 1
	})
	if r := c.record(n, sent.MsgID); r.Exec != task.Running {
		t.Fatalf("the answer was over (%s) before botctl_tasks was read: raise AnswerTime", r.Exec)
	}
	fams := scrape(t, n.api)
	if v := value(fams, "botctl_worker_slots_busy", nil); v == nil || *v != 1 {
		t.Errorf("botctl_worker_slots_busy mid-answer = %v, want 1", v)
	}

	testwait.Eventually(t, waitLong, "the final frame throttled", func() bool {
		v := value(scrape(t, n.api), "botctl_pusher_events_total", map[string]string{"bot": "b1", "event": "throttled"})
		return v != nil && *v > 0
	})
	if r := c.record(n, sent.MsgID); r.Exec != task.Succeeded || r.Delivery != task.Streaming {
		t.Errorf("after the throttle: exec %s, delivery %s; want succeeded, streaming (the final frame waits for the budget)", r.Exec, r.Delivery)
	}
	if k := answered(c.bot("alice"), "a long answer please"); k != 0 {
		t.Errorf("the answer was shown %d time(s) with the budget spent by the receipt", k)
	}
}

// /readyz follows the node's dependencies: ready while etcd and NATS
// answer and the bot it leads is subscribed; not ready (503, naming NATS)
// while NATS is down, with /healthz still 200 (alive); ready again once
// NATS is back.
func TestReadinessFollowsNATS(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", nil)
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	testwait.Eventually(t, waitLong, "ready", func() bool {
		code, r := ready(t, n.api)
		return code == http.StatusOK && r.Ready && r.Bots["b1"] == "subscribed" && r.Etcd == "ok" && r.NATS == "ok"
	})

	url := c.nats.ClientURL()
	c.nats.Close()
	var last readiness
	testwait.Eventually(t, waitLong, "not ready while NATS is down", func() bool {
		code, r := ready(t, n.api)
		last = r
		return code == http.StatusServiceUnavailable && !r.Ready && strings.HasPrefix(r.NATS, "not connected") &&
			len(r.Reasons) > 0 && strings.Contains(r.Reasons[0], "NATS")
	})
	resp, err := obsHTTP.Get(n.api + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz while NATS is down: %s; want 200 (liveness asks nothing external)", resp.Status)
	}
	if last.Etcd != "ok" || last.Bots["b1"] != "subscribed" {
		t.Errorf("while NATS is down: etcd %q, b1 %q; want ok and subscribed (only NATS is away)", last.Etcd, last.Bots["b1"])
	}
	fams := scrape(t, n.api)
	if v := value(fams, "botctl_nats_connected", nil); v == nil || *v != 0 {
		t.Errorf("botctl_nats_connected while NATS is down = %v, want 0", v)
	}

	c.restartNATS(url)
	testwait.Eventually(t, waitLong, "ready again after NATS is back", func() bool {
		code, r := ready(t, n.api)
		return code == http.StatusOK && r.Ready
	})
	fams = scrape(t, n.api)
	if v := value(fams, "botctl_nats_reconnects_total", nil); v == nil || *v < 1 {
		t.Errorf("botctl_nats_reconnects_total after the outage = %v, want >= 1", v)
	}
	if v := value(fams, "botctl_nats_errors_total", map[string]string{"kind": "disconnect"}); v == nil || *v < 1 {
		t.Errorf("botctl_nats_errors_total{kind=disconnect} after the outage = %v, want >= 1", v)
	}
}

// /readyz follows etcd as it follows NATS: not ready (503, naming etcd)
// while etcd is unreachable, /healthz still 200 (a supervisor must not
// restart a node for an etcd outage); ready again, leading b1 with its
// connection subscribed, once etcd is back.
func TestReadinessFollowsEtcd(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", nil)
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	testwait.Eventually(t, waitLong, "ready", func() bool {
		code, r := ready(t, n.api)
		return code == http.StatusOK && r.Ready && r.Bots["b1"] == "subscribed" && r.Etcd == "ok"
	})

	c.etcd.Close()
	var last readiness
	testwait.Eventually(t, waitLong, "not ready while etcd is down", func() bool {
		code, r := ready(t, n.api)
		last = r
		if code != http.StatusServiceUnavailable || r.Ready || r.Etcd == "ok" || r.Etcd == "" {
			return false
		}
		for _, why := range r.Reasons {
			if strings.HasPrefix(why, "etcd unreachable: ") {
				return true
			}
		}
		return false
	})
	if last.NATS != "ok" {
		t.Errorf("while etcd is down: nats %q, want ok (only etcd is away)", last.NATS)
	}
	resp, err := obsHTTP.Get(n.api + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz while etcd is down: %s; want 200 (liveness asks nothing external)", resp.Status)
	}

	c.restartEtcd()
	testwait.Eventually(t, waitLong, "ready again after etcd is back, b1 led and subscribed", func() bool {
		code, r := ready(t, n.api)
		return code == http.StatusOK && r.Ready && r.Etcd == "ok" && r.Bots["b1"] == "subscribed"
	})
	fams := scrape(t, n.api)
	if v := value(fams, "botctl_etcd_errors_total", map[string]string{"op": "probe"}); v == nil || *v < 1 {
		t.Errorf("botctl_etcd_errors_total{op=probe} after the outage = %v, want >= 1", v)
	}
}

// A node that has won the election but whose WeCom subscribe is not
// acknowledged yet (the simulator withholds acks) leads nothing yet: it is
// not ready, and says which bot is not subscribed; once the subscribe is
// acknowledged it is ready.
func TestReadinessLeaderConnecting(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	// Before the node starts: its first subscribe waits for an ack that
	// does not come (up to the dial timeout, then again after a backoff).
	if err := c.sim.Fault(wecomsim.FaultRequest{BotID: "b1", Action: wecomsim.FaultStallAcks, Seconds: 300}); err != nil {
		t.Fatal(err)
	}
	n := c.start("n1", nil)
	const connecting = "won the election; WeCom connection not subscribed yet"
	testwait.Eventually(t, waitLong, "not ready while b1's subscribe is unacknowledged", func() bool {
		code, r := ready(t, n.api)
		return code == http.StatusServiceUnavailable && !r.Ready && r.Bots["b1"] == connecting &&
			len(r.Reasons) == 1 && r.Reasons[0] == "bot b1: "+connecting && r.Etcd == "ok" && r.NATS == "ok"
	})
	if err := c.sim.Fault(wecomsim.FaultRequest{BotID: "b1", Action: wecomsim.FaultClear}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitLong, "ready once b1's subscribe is acknowledged", func() bool {
		code, r := ready(t, n.api)
		return code == http.StatusOK && r.Ready && r.Bots["b1"] == "subscribed"
	})
}

// JetStream failing under the node's hot paths is counted, not only the
// /metrics collector's own reads (op "scrape"): with NATS stopped
// mid-answer, the running task's output writes fail (op "output_write",
// the worker's), and a question asked meanwhile has its publish fail and
// fall back to the spool (op "publish"); both are on
// botctl_nats_errors_total{kind="request"} by the time NATS is back.
func TestNATSErrorsCountedOnHotPaths(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	// Longer than the outage: the task is still running, writing its
	// output every second, while NATS is away.
	n := c.start("n1", func(cfg *config.Config) { cfg.AI.Demo.AnswerTime = 5 * time.Minute })
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	count := func(fams map[string]*dto.MetricFamily, op string) float64 {
		if v := value(fams, "botctl_nats_errors_total", map[string]string{"kind": "request", "op": op}); v != nil {
			return *v
		}
		return 0
	}
	fams := scrape(t, n.api)
	publishes, outputs := count(fams, "publish"), count(fams, "output_write")
	sent := c.post("alice", "a question for the outage")
	testwait.Eventually(t, waitLong, "the task running", func() bool { return c.record(n, sent.MsgID).Exec == task.Running })

	url := c.nats.ClientURL()
	c.nats.Close()
	testwait.Eventually(t, waitLong, "NATS seen down", func() bool {
		code, r := ready(t, n.api)
		return code == http.StatusServiceUnavailable && strings.HasPrefix(r.NATS, "not connected")
	})
	c.post("bob", "asked while JetStream is away")
	testwait.Eventually(t, waitLong, "bob receipted (his task spooled)", func() bool { return len(c.bot("bob")) > 0 })
	// A write waits for its reply up to its timeout (10 s) before it counts
	// as failed: NATS stays away until it has.
	testwait.Eventually(t, waitLong, "a failed output write of alice's running task counted", func() bool {
		return count(scrape(t, n.api), "output_write") > outputs
	})

	c.restartNATS(url)
	testwait.Eventually(t, waitLong, "ready again", func() bool {
		code, r := ready(t, n.api)
		return code == http.StatusOK && r.Ready
	})
	if v := count(scrape(t, n.api), "publish"); v <= publishes {
		t.Fatalf("botctl_nats_errors_total{kind=request,op=publish} = %g after the outage, was %g: bob's failed publish was not counted", v, publishes)
	}
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }
func gt(min float64) func(float64) bool  { return func(v float64) bool { return v > min } }
func ge(min float64) func(float64) bool  { return func(v float64) bool { return v >= min } }

// obsHTTP keeps no idle connections (the package's goleak check).
var obsHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// The leader is ready with its bot subscribed; a standby is ready too,
// leading nothing (readiness asks a connection only of the bots a node
// has won); after the leader stops, the standby leads and says so.
func TestReadinessLeaderAndStandby(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n1 := c.start("n1", nil)
	testwait.Eventually(t, waitLong, "n1 leads", c.connected)
	n2 := c.start("n2", nil)
	testwait.Eventually(t, waitLong, "n1 ready with b1 subscribed", func() bool {
		code, r := ready(t, n1.api)
		return code == http.StatusOK && r.Bots["b1"] == "subscribed"
	})
	testwait.Eventually(t, waitLong, "n2 ready as a standby", func() bool {
		code, r := ready(t, n2.api)
		_, leads := r.Bots["b1"]
		return code == http.StatusOK && r.Ready && !leads
	})
	n1.stop()
	testwait.Eventually(t, waitLong, "n2 ready with b1 subscribed", func() bool {
		code, r := ready(t, n2.api)
		return code == http.StatusOK && r.Bots["b1"] == "subscribed"
	})
	fams := scrape(t, n2.api)
	if v := value(fams, "botctl_bot_leader", map[string]string{"bot": "b1"}); v == nil || *v != 1 {
		t.Errorf("n2's botctl_bot_leader{bot=b1} after the handover = %v, want 1", v)
	}
	if v := value(fams, "botctl_leader_terms_total", map[string]string{"bot": "b1"}); v == nil || *v != 1 {
		t.Errorf("n2's botctl_leader_terms_total{bot=b1} = %v, want 1", v)
	}
}
