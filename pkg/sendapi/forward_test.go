package sendapi

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/prometheus/client_golang/prometheus"
)

// elsewhere is a leader's API at https://HOST:8401 on another machine, as
// the node registry names it: every dial of the standby's client reaches
// the test's TLS server (its certificate checked as example.com's), and
// the token that arrives is counted.
type elsewhere struct {
	srv    *httptest.Server
	tokens atomic.Int32
}

func newElsewhere(t *testing.T) *elsewhere {
	t.Helper()
	e := &elsewhere{}
	e.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer tok" {
			e.tokens.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"bot":"b1","node":"n1","msgid":"m1"}`)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// client is the standby's client to e: TLS trusting e's certificate (as
// api.ca_file's CA would), dialled to e whatever the address.
func (e *elsewhere) client() *http.Client {
	tr := e.srv.Client().Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.ServerName = "example.com"
	target := e.srv.Listener.Addr().String()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, target)
	}
	tr.DialTLSContext = nil
	return &http.Client{Transport: tr}
}

// A standby sends its token to a leader on another machine only when
// api.ca_file verifies the leader's certificate or api.forward_peers
// lists its host: otherwise (the address comes from etcd, which a writer
// of etcd may have put there) it answers 503, naming both keys, and
// nothing reaches that address.
func TestSendForwardsTheTokenOnlyWhereTheConfigVouches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		addr   string
		edit   func(*config.API)
		reason string // "": forwarded
	}{
		{"system roots only", "https://node-b.internal:8401", func(*config.API) {}, "api.forward_peers"},
		{"the cluster's CA", "https://node-b.internal:8401", func(a *config.API) { a.CAFile = "/etc/botctl/tls/ca.pem" }, ""},
		{"a listed host", "https://node-b.internal:8401", func(a *config.API) { a.ForwardPeers = []string{"node-a.internal", "node-b.internal"} }, ""},
		{"a listed host:port", "https://10.0.0.12:8401", func(a *config.API) { a.ForwardPeers = []string{"10.0.0.12:8401"} }, ""},
		{"an unlisted host", "https://evil.example:8401", func(a *config.API) { a.ForwardPeers = []string{"node-b.internal"} }, "api.ca_file"},
		{"a listed host, another port", "https://10.0.0.12:9999", func(a *config.API) { a.ForwardPeers = []string{"10.0.0.12:8401"} }, "api.forward_peers"},
		{"a listed host over plain http", "http://node-b.internal:8401", func(a *config.API) { a.ForwardPeers = []string{"node-b.internal"} }, "plain http"},
		{"the CA over plain http", "http://node-b.internal:8401", func(a *config.API) { a.CAFile = "/etc/botctl/tls/ca.pem" }, "plain http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newElsewhere(t)
			cfg := config.Defaults()
			cfg.NodeID, cfg.Bots = "n2", []config.Bot{{ID: "b1"}}
			cfg.API.TokenFile = "/the/shared/token"
			tc.edit(&cfg.API)
			reg := prometheus.NewRegistry()
			a := New(Options{Config: cfg, Node: standby{id: "n1", addr: tc.addr}, Token: "tok", Client: e.client(), WriteTimeout: time.Minute, Metrics: reg})
			rec, res := send(t, a, "b1", hello)
			if tc.reason == "" {
				if rec.Code != http.StatusOK || res.Node != "n1" || e.tokens.Load() != 1 {
					t.Fatalf("%d %s, the leader got the token %d times: want the leader's answer relayed", rec.Code, rec.Body, e.tokens.Load())
				}
				return
			}
			if rec.Code != http.StatusServiceUnavailable || res.Leader != tc.addr || !strings.Contains(res.Reason, tc.reason) {
				t.Fatalf("%d %s: want 503 with a reason naming %q", rec.Code, rec.Body, tc.reason)
			}
			if tc.reason != "plain http" && (!strings.Contains(res.Reason, "api.ca_file") || !strings.Contains(res.Reason, "api.forward_peers")) {
				t.Fatalf("reason %q: want both api.ca_file and api.forward_peers named", res.Reason)
			}
			if n := e.tokens.Load(); n != 0 {
				t.Fatalf("the address got the token %d times", n)
			}
			if got := sends(t, reg); got["b1/not_leader"] != 1 {
				t.Fatalf("botctl_api_sends_total = %v, want b1/not_leader 1", got)
			}
		})
	}
}

// A leader's API that answers with a redirect has it relayed, not
// followed: the token goes to the registered address only.
func TestSendForwardFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	var elsewhereTokens atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			elsewhereTokens.Add(1)
		}
	}))
	defer other.Close()
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", other.URL+r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTemporaryRedirect)
		io.WriteString(w, `{"error":"moved"}`)
	}))
	defer leader.Close()
	a, _ := newStandby(standby{id: "n1", addr: leader.URL}, true)
	rec, res := send(t, a, "b1", hello)
	if rec.Code != http.StatusTemporaryRedirect || res.Error != "moved" || elsewhereTokens.Load() != 0 {
		t.Fatalf("%d %s, the redirect's target got %d requests with a token: want the 307 relayed, not followed", rec.Code, rec.Body, elsewhereTokens.Load())
	}
}
