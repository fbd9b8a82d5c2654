package metrics_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/buildinfo"
	"github.com/botctl/botctl/pkg/metrics"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Two nodes in one process keep their own counts; AlertsSent is the one
// process-wide counter, on both.
func TestRegistriesArePerNode(t *testing.T) {
	a, b := metrics.New(), metrics.New()
	a.FrameIn("b1", "aibot_msg_callback")
	a.FrameOut("b1", "aibot_respond_msg", 0)
	a.FrameOut("b1", "aibot_respond_msg", 846609)
	a.FrameOut("b1", "aibot_respond_msg", -1)
	a.Receipted("b1", 3*time.Millisecond)
	a.PushLag("b1", 200*time.Millisecond)
	a.TermStarted("b1")
	a.EtcdError("probe")
	a.NATSError("disconnect", "")
	a.NATSError("request", "output_write")
	a.CorruptRecord("b1", "sweep")
	metrics.AlertSent("webhook", "open", "auto", false)

	text := func(m *metrics.Node) string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		p := expfmt.NewTextParser(model.UTF8Validation)
		if _, err := p.TextToMetricFamilies(strings.NewReader(rec.Body.String())); err != nil {
			t.Fatalf("unparsable: %v", err)
		}
		return rec.Body.String()
	}
	ta, tb := text(a), text(b)
	for _, line := range []string{
		`botctl_wecom_frames_in_total{bot="b1",cmd="aibot_msg_callback"} 1`,
		`botctl_wecom_frames_out_total{bot="b1",cmd="aibot_respond_msg",errcode="0"} 1`,
		`botctl_wecom_frames_out_total{bot="b1",cmd="aibot_respond_msg",errcode="846609"} 1`,
		`botctl_wecom_frames_out_total{bot="b1",cmd="aibot_respond_msg",errcode="-1"} 1`,
		`botctl_receipt_latency_seconds_count{bot="b1"} 1`,
		`botctl_receipt_latency_seconds_bucket{bot="b1",le="0.004"} 1`,
		`botctl_push_lag_seconds_count{bot="b1"} 1`,
		`botctl_leader_terms_total{bot="b1"} 1`,
		`botctl_etcd_errors_total{op="probe"} 1`,
		`botctl_nats_errors_total{kind="disconnect",op=""} 1`,
		`botctl_nats_errors_total{kind="request",op="output_write"} 1`,
		`botctl_corrupt_records_total{bot="b1",where="sweep"} 1`,
	} {
		if !strings.Contains(ta, line+"\n") {
			t.Errorf("node a lacks %s", line)
		}
		if strings.Contains(tb, line+"\n") {
			t.Errorf("node b has node a's %s", line)
		}
	}
	alert := `botctl_alerts_sent_total{kind="open",level="auto",result="failed",sink="webhook"} 1`
	if !strings.Contains(ta, alert) || !strings.Contains(tb, alert) {
		t.Errorf("AlertsSent not on both registries")
	}
}

// Every registry says which build its node runs.
func TestBuildInfo(t *testing.T) {
	rec := httptest.NewRecorder()
	metrics.New().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	in := buildinfo.Get()
	want := `botctl_build_info{commit="` + in.Commit + `",goversion="` + in.Go + `",version="` + in.Version + `"} 1`
	if !strings.Contains(rec.Body.String(), want+"\n") {
		t.Fatalf("/metrics lacks %s", want)
	}
}

// A closed incident's spans are observed by name; a span it does not have
// (0) is not.
func TestIncidentClosed(t *testing.T) {
	m := metrics.New()
	m.IncidentClosed("b1", "outage", 2*time.Second, 500*time.Millisecond, 0)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, line := range []string{
		`botctl_incident_seconds_sum{bot="b1",kind="outage",span="t1"} 2`,
		`botctl_incident_seconds_count{bot="b1",kind="outage",span="t2"} 1`,
		`botctl_incident_seconds_bucket{bot="b1",kind="outage",span="t2",le="1"} 1`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	if strings.Contains(body, `span="t3"`) {
		t.Error("a span the incident lacks was observed")
	}
}

// The registry names every family its collectors describe, counted or
// not.
func TestRegistryNames(t *testing.T) {
	names := strings.Join(metrics.New().Registry.Names(), " ")
	for _, want := range []string{"botctl_wecom_frames_in_total", "botctl_incident_seconds", "botctl_build_info", "botctl_ai_first_token_seconds", "go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(" "+names+" ", " "+want+" ") {
			t.Errorf("Names() lacks %s: %s", want, names)
		}
	}
}
