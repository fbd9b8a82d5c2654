package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/dispatch"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/worker"
	"github.com/rs/zerolog"
)

const testToken = "0123456789abcdef0123456789abcdef"

// apiNode is a node with JetStream bound and a real worker (demo backend)
// behind its API, served on a loopback listener.
func apiNode(t *testing.T, token string) (base string) {
	return apiNodeWith(t, apiSpec{Token: token})
}

// apiSpec is what an apiNode is built with; zero fields take defaults.
type apiSpec struct {
	Token      string
	API        config.API
	Slots      int           // the worker's slots; default 4
	AnswerTime time.Duration // the demo backend's; default 10ms
}

func apiNodeWith(t *testing.T, spec apiSpec) (base string) {
	t.Helper()
	base, _ = apiNodeLC(t, spec)
	return base
}

// apiNodeLC is apiNodeWith, with the node's lifecycle (its task records).
func apiNodeLC(t *testing.T, spec apiSpec) (base string, lc *task.Lifecycle) {
	t.Helper()
	if spec.Slots == 0 {
		spec.Slots = 4
	}
	if spec.AnswerTime == 0 {
		spec.AnswerTime = 10 * time.Millisecond
	}
	env := testenv.StartJetStream(t, jetstream.Options{})
	backend, err := ai.New(ai.Config{Kind: ai.KindDemo, Demo: ai.DemoConfig{AnswerTime: spec.AnswerTime}})
	if err != nil {
		t.Fatal(err)
	}
	lc = task.NewLifecycle(env.Store, "n1", zerolog.Nop())
	w, err := worker.New(worker.Config{NodeID: "n1", Slots: spec.Slots, Backend: backend, Store: env.Store, Lifecycle: lc,
		Deadline: time.Hour, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{Worker: w, Store: env.Store, Lifecycle: lc, ready: make(chan struct{}), token: spec.Token, log: zerolog.Nop(), cfg: config.Config{API: spec.API}}
	close(n.ready)
	n.obs = newObserver(n, env.Conn, nil) // /metrics, /healthz, /readyz (no etcd here: /readyz is not asked)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	srv := n.apiServer(ctx, &wg, nil)
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 {
		t.Fatalf("server timeouts not all set: %+v", srv)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, url, err := apiListener(raw, spec.API)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		cancel()
		srv.Close()
		wg.Wait()
	})
	return url, lc
}

// api.pprof mounts Go's profiler behind the token: with the token, an
// allocation profile (gzipped protobuf, what `go tool pprof` reads);
// without it, 401 on every profiler path; cmdline (argv) is not served.
// Off, the default, there is no /debug/pprof/ at all.
func TestPprofIsBehindTheTokenAndOffByDefault(t *testing.T) {
	t.Parallel()
	on := apiNodeWith(t, apiSpec{Token: testToken, API: config.API{Pprof: true}})
	off := apiNode(t, testToken)
	get := func(url, auth string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	code, body := get(on+"/debug/pprof/allocs?debug=0", "Bearer "+testToken)
	if code != http.StatusOK || !bytes.HasPrefix(body, []byte{0x1f, 0x8b}) {
		t.Fatalf("GET /debug/pprof/allocs?debug=0 with the token: %d, %d bytes starting %q: want 200 and a gzipped profile", code, len(body), body[:min(len(body), 16)])
	}
	for _, p := range []string{"/debug/pprof/allocs?debug=0", "/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1", "/debug/pprof/symbol"} {
		for _, auth := range []string{"", "Bearer wrong-token-0123456789abc"} {
			if code, _ := get(on+p, auth); code != http.StatusUnauthorized {
				t.Errorf("GET %s with Authorization %q: %d, want 401", p, auth, code)
			}
		}
	}
	if code, _ := get(on+"/debug/pprof/cmdline", "Bearer "+testToken); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/cmdline with the token: %d, want 404 (argv is not served)", code)
	}
	for _, p := range []string{"/debug/pprof/allocs?debug=0", "/debug/pprof/", "/debug/pprof/profile?seconds=1"} {
		if code, _ := get(off+p, "Bearer "+testToken); code != http.StatusNotFound {
			t.Errorf("api.pprof off: GET %s with the token: %d, want 404", p, code)
		}
	}
}

func post(t *testing.T, url, auth string, body []byte) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// POST /v1/exec runs only with the cluster's bearer token, and the
// dispatcher's tier-2 call sends it; the status endpoints take no writes.
func TestExecAsksForTheToken(t *testing.T) {
	t.Parallel()
	base := apiNode(t, testToken)
	m := task.Message{TaskID: task.ID("b", "m1"), Bot: "b", MsgID: "m1", Chat: "alice", Question: "q", Received: time.Now()}
	body, _ := json.Marshal(m)
	for _, auth := range []string{"", "Bearer ", "Bearer wrong-token-0123456789abc", "Basic " + testToken, testToken, "Bearer " + testToken + "x"} {
		resp := post(t, base+dispatch.ExecPath, auth, body)
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("Authorization %q: %s, want 401 with WWW-Authenticate: Bearer", auth, resp.Status)
		}
	}

	unavailable := queueFunc(func(context.Context, string, string, string, []byte) (jetstream.PublishResult, error) {
		return jetstream.PublishResult{}, jetstream.ErrUnavailable
	})
	withToken, _ := dispatch.New(dispatch.Config{Queue: unavailable, FixedWorker: base, Token: testToken, Logger: zerolog.Nop()})
	out, err := withToken.Dispatch(context.Background(), m)
	if err != nil || out.Tier != dispatch.TierFixed {
		t.Fatalf("dispatcher with the token: %+v %v, want the fixed tier", out, err)
	}
	m2 := m
	m2.TaskID, m2.MsgID, m2.Chat = task.ID("b", "m2"), "m2", "bob"
	without, _ := dispatch.New(dispatch.Config{Queue: unavailable, FixedWorker: base, Logger: zerolog.Nop()})
	if out, err := without.Dispatch(context.Background(), m2); err == nil || !strings.Contains(err.Error(), "api.token_file") {
		t.Fatalf("dispatcher without the token: %+v %v, want a refusal naming api.token_file", out, err)
	}

	for _, path := range []string{"/status", "/healthz"} {
		if resp := post(t, base+path, "Bearer "+testToken, nil); resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: %s, want 405 (read-only)", path, resp.Status)
		}
	}
}

// POST /v1/exec is bounded by the worker's slots: with its one slot taken
// by a long answer, the next task is refused at once with 503 and a body
// that says why, not queued behind the first or started over the bound.
func TestExecBoundedBySlots(t *testing.T) {
	t.Parallel()
	base := apiNodeWith(t, apiSpec{Token: testToken, Slots: 1, AnswerTime: 10 * time.Minute})
	exec := func(msgid, chat string) (*http.Response, map[string]string) {
		t.Helper()
		m := task.Message{TaskID: task.ID("b", msgid), Bot: "b", MsgID: msgid, Chat: chat, Question: "q", Received: time.Now()}
		body, _ := json.Marshal(m)
		req, _ := http.NewRequest(http.MethodPost, base+dispatch.ExecPath, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatalf("POST %s for %s: %s with a body that is not JSON: %v", dispatch.ExecPath, msgid, resp.Status, err)
		}
		return resp, got
	}
	resp, got := exec("m1", "alice")
	if resp.StatusCode != http.StatusAccepted || got["task_id"] != task.ID("b", "m1") {
		t.Fatalf("first task on a free slot: %s %v, want 202 with its task_id", resp.Status, got)
	}
	resp, got = exec("m2", "bob")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second task on a worker with its one slot busy: %s %v, want 503", resp.Status, got)
	}
	if why := got["error"]; !strings.Contains(why, "every slot is busy (1 of 1)") || !strings.Contains(why, "not started") {
		t.Fatalf("503 body %v, want an error that says every slot is busy (1 of 1) and the task was not started", got)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	// The dispatcher's fixed tier, refused, says why in its error.
	unavailable := queueFunc(func(context.Context, string, string, string, []byte) (jetstream.PublishResult, error) {
		return jetstream.PublishResult{}, jetstream.ErrUnavailable
	})
	d, _ := dispatch.New(dispatch.Config{Queue: unavailable, FixedWorker: base, Token: testToken, Logger: zerolog.Nop()})
	m := task.Message{TaskID: task.ID("b", "m3"), Bot: "b", MsgID: "m3", Chat: "carol", Question: "q", Received: time.Now()}
	if out, err := d.Dispatch(context.Background(), m); err == nil || !strings.Contains(err.Error(), "every slot is busy") {
		t.Fatalf("dispatch to the full fixed worker: %+v %v, want an error that says every slot is busy", out, err)
	}
}

// A node API on a non-loopback address without api.token_file does not
// start, and says which key fixes it.
func TestRunRefusesOpenListenerWithoutToken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Skip("cannot listen on 0.0.0.0:", err)
	}
	defer ln.Close()
	cfg := config.Defaults()
	err = Run(context.Background(), Options{Config: cfg, Listener: ln, Logger: zerolog.Nop()})
	if err == nil || !strings.Contains(err.Error(), "config key api.token_file") {
		t.Fatalf("Run = %v, want a refusal naming api.token_file", err)
	}
	if err := checkListener(ln, testToken); err != nil {
		t.Fatalf("with a token: %v", err)
	}
	lo, _ := net.Listen("tcp", "127.0.0.1:0")
	defer lo.Close()
	if err := checkListener(lo, ""); err != nil {
		t.Fatalf("loopback without a token: %v", err)
	}
	// A token file too short is refused before anything starts.
	short := filepath.Join(t.TempDir(), "token")
	os.WriteFile(short, []byte("abc"), 0o600)
	cfg.API.TokenFile = short
	if err := Run(context.Background(), Options{Config: cfg, Listener: lo, Logger: zerolog.Nop()}); err == nil || !strings.Contains(err.Error(), "api.token_file") {
		t.Fatalf("short token: %v", err)
	}
}

// With api.cert_file the API is served over HTTPS and registered as
// https://; the dispatcher, trusting api.ca_file, reaches it with the
// token; a caller that does not trust the CA is refused by TLS.
func TestExecOverHTTPS(t *testing.T) {
	t.Parallel()
	ca := testenv.NewCA(t)
	cert, key := ca.Issue(t, "node")
	a := config.API{CertFile: cert, KeyFile: key, CAFile: ca.CAFile}
	base := apiNodeWith(t, apiSpec{Token: testToken, API: a})
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("API URL %s, want https://", base)
	}
	hc, err := apiClient(a)
	if err != nil {
		t.Fatal(err)
	}
	unavailable := queueFunc(func(context.Context, string, string, string, []byte) (jetstream.PublishResult, error) {
		return jetstream.PublishResult{}, jetstream.ErrUnavailable
	})
	m := task.Message{TaskID: task.ID("b", "m1"), Bot: "b", MsgID: "m1", Chat: "alice", Question: "q", Received: time.Now()}
	d, _ := dispatch.New(dispatch.Config{Queue: unavailable, FixedWorker: base, Token: testToken, Client: hc, Logger: zerolog.Nop()})
	if out, err := d.Dispatch(context.Background(), m); err != nil || out.Tier != dispatch.TierFixed {
		t.Fatalf("over HTTPS: %+v %v, want the fixed tier", out, err)
	}
	m.TaskID, m.MsgID, m.Chat = task.ID("b", "m2"), "m2", "bob"
	untrusting, _ := dispatch.New(dispatch.Config{Queue: unavailable, FixedWorker: base, Token: testToken, Logger: zerolog.Nop()})
	if _, err := untrusting.Dispatch(context.Background(), m); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v, want a certificate error", err)
	}
}

// queueFunc is a dispatch.Queue that publishes with f.
type queueFunc func(ctx context.Context, bot, conv, msgid string, p []byte) (jetstream.PublishResult, error)

func (f queueFunc) PublishTask(ctx context.Context, bot, conv, msgid string, p []byte) (jetstream.PublishResult, error) {
	return f(ctx, bot, conv, msgid, p)
}
