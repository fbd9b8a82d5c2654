package sendapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/prometheus/client_golang/prometheus"
)

// standby is a node that serves bot b1 without its connection: the
// leader it reports is id at addr, or err.
type standby struct {
	id, addr string
	err      error
}

func (s standby) Serves(bot string) bool  { return bot == "b1" }
func (s standby) Conn(string) *wecom.Conn { return nil }
func (s standby) Budget(string) Budget    { return pace.New(10, time.Minute, nil) }
func (s standby) Gate(string) Gate        { return nil }
func (s standby) Leader(context.Context, string) (string, string, error) {
	return s.id, s.addr, s.err
}

// newStandby is the send API of node n2 on s, with the cluster's shared
// token file when shared.
func newStandby(s standby, shared bool) (*API, *prometheus.Registry) {
	cfg := config.Defaults()
	cfg.NodeID, cfg.Bots = "n2", []config.Bot{{ID: "b1"}}
	if shared {
		cfg.API.TokenFile = "/the/shared/token"
	}
	reg := prometheus.NewRegistry()
	return New(Options{Config: cfg, Node: s, Token: "tok", Client: &http.Client{}, WriteTimeout: time.Minute, Metrics: reg}), reg
}

// send POSTs body to a's handler as bot with the headers hdr (name,
// value, …) and decodes its answer.
func send(t *testing.T, a *API, bot, body string, hdr ...string) (*httptest.ResponseRecorder, Result) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(Path, a)
	req := httptest.NewRequest(http.MethodPost, URL(bot), strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	var res Result
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
		t.Fatalf("answer %d is not JSON: %q", rec.Code, rec.Body.String())
	}
	return rec, res
}

// sends is botctl_api_sends_total on reg, by "bot/outcome".
func sends(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "botctl_api_sends_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			got[l["bot"]+"/"+l["outcome"]] = m.GetCounter().GetValue()
		}
	}
	return got
}

const hello = `{"chat":"alice","msgtype":"markdown","markdown":{"content":"hi"}}`

// A standby that cannot forward a send answers 503 not_leader with
// Retry-After, the leader's address where it knows it and why, for each
// reason; a leader without its connection yet is 503 unavailable. Nothing
// reaches the leader.
func TestSendStandbySaysWhyItDoesNotForward(t *testing.T) {
	t.Parallel()
	reached := 0
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ }))
	defer leader.Close()
	for _, tc := range []struct {
		name    string
		node    standby
		shared  bool
		hdr     []string
		leader  string // the answer's Leader
		reason  string // in the answer's Reason
		outcome string
	}{
		{"no etcd", standby{err: ErrNoLeaderLookup}, true, nil, "", "no etcd client", "not_leader"},
		{"no leader", standby{err: election.ErrNoLeader}, true, nil, "", "no node holds bot b1's election", "not_leader"},
		{"etcd unreadable", standby{err: errors.New("etcdserver: request timed out")}, true, nil, "", "cannot be read from etcd", "not_leader"},
		{"leader unregistered", standby{id: "n1"}, true, nil, "", "not in the node registry", "not_leader"},
		{"forwarded already", standby{id: "n1", addr: leader.URL}, true, []string{ForwardedHeader, "n3"}, leader.URL, "forwarded already", "not_leader"},
		{"no shared token", standby{id: "n1", addr: leader.URL}, false, nil, leader.URL, "api.token_file", "not_leader"},
		{"plain http elsewhere", standby{id: "n1", addr: "http://10.0.0.11:8401"}, true, nil, "http://10.0.0.11:8401", "plain http", "not_leader"},
		{"leads without a connection", standby{id: "n2", addr: "http://127.0.0.1:1"}, true, nil, "http://127.0.0.1:1", "", "unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, reg := newStandby(tc.node, tc.shared)
			rec, res := send(t, a, "b1", hello, tc.hdr...)
			if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || res.Bot != "b1" || res.Leader != tc.leader ||
				!strings.Contains(res.Reason, tc.reason) || res.Error == "" {
				t.Fatalf("%d %s (Retry-After %q): want 503 with Leader %q and a reason naming %q", rec.Code, rec.Body, rec.Header().Get("Retry-After"), tc.leader, tc.reason)
			}
			if got := sends(t, reg); len(got) != 1 || got["b1/"+tc.outcome] != 1 {
				t.Fatalf("botctl_api_sends_total = %v, want b1/%s 1 only", got, tc.outcome)
			}
		})
	}
	if reached != 0 {
		t.Fatalf("the leader was called %d times", reached)
	}
}

// A standby forwards a send to the leader's API (here on this machine)
// with the node's token and ForwardedHeader, and relays the leader's
// answer as it is: status, body and Retry-After. A leader that refuses
// the token is a 503 naming api.token_file.
func TestSendStandbyForwardsToTheLeaderAndRelaysItsAnswer(t *testing.T) {
	t.Parallel()
	var got struct{ auth, by, body, path string }
	status := http.StatusTooManyRequests
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		got.auth, got.by, got.body, got.path = r.Header.Get("Authorization"), r.Header.Get(ForwardedHeader), string(raw), r.URL.Path
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(status)
		io.WriteString(w, `{"error":"the leader's answer","bot":"b1","node":"n1"}`)
	}))
	defer leader.Close()
	a, reg := newStandby(standby{id: "n1", addr: leader.URL}, true)

	rec, res := send(t, a, "b1", hello)
	if rec.Code != status || rec.Header().Get("Retry-After") != "7" || res.Error != "the leader's answer" || res.Node != "n1" {
		t.Fatalf("relayed %d %s (Retry-After %q), want the leader's 429 as it is", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	if got.auth != "Bearer tok" || got.by != "n2" || got.body != hello || got.path != URL("b1") {
		t.Fatalf("the leader got %+v: want the token, %s n2, the body as sent, at %s", got, ForwardedHeader, URL("b1"))
	}
	if got := sends(t, reg); len(got) != 1 || got["b1/forwarded"] != 1 {
		t.Fatalf("botctl_api_sends_total = %v, want b1/forwarded 1 only", got)
	}

	status = http.StatusUnauthorized
	rec, res = send(t, a, "b1", hello)
	if rec.Code != http.StatusServiceUnavailable || res.Leader != leader.URL || !strings.Contains(res.Reason, "api.token_file") {
		t.Fatalf("a leader that refuses the token: %d %s, want 503 naming api.token_file", rec.Code, rec.Body)
	}
}
