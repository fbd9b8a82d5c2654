package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/dispatch"
	"github.com/botctl/botctl/pkg/task"
)

// A node without api.token_file still asks every caller of its API for a
// token: the one it generated in its data dir at its first start (mode
// 0600), and the same one after a restart. Liveness, readiness and metrics
// stay open to supervisors and Prometheus.
func TestNodeAPIAlwaysAsksForAToken(t *testing.T) {
	t.Parallel()
	e, ns := startEtcd(t), startNATS(t)
	cfg := nodeConfig(t, startSim(t), e, ns.ClientURL())
	rn, err := startNode(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.DataDir, config.GeneratedTokenFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no token generated in the data dir: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %s, want 0600", path, fi.Mode().Perm())
	}
	token, err := cfg.API.CallerToken(cfg.DataDir)
	if err != nil || len(token) < config.MinTokenBytes {
		t.Fatalf("generated token %q, %v: want at least %d bytes", token, err, config.MinTokenBytes)
	}

	m := task.Message{TaskID: task.ID("b1", "m1"), Bot: "b1", MsgID: "m1", Chat: "alice", Question: "q", Received: time.Now()}
	body, _ := json.Marshal(m)
	call := func(method, path, auth string) int {
		t.Helper()
		req, _ := http.NewRequest(method, rn.API+path, bytes.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, auth := range []string{"", "Bearer ", "Bearer " + strings.Repeat("0", 64)} {
		if code := call(http.MethodPost, dispatch.ExecPath, auth); code != http.StatusUnauthorized {
			t.Errorf("POST %s with Authorization %q: %d, want 401", dispatch.ExecPath, auth, code)
		}
		if code := call(http.MethodGet, "/status", auth); code != http.StatusUnauthorized {
			t.Errorf("GET /status with Authorization %q: %d, want 401", auth, code)
		}
	}
	if code := call(http.MethodGet, "/status", "Bearer "+token); code != http.StatusOK {
		t.Errorf("GET /status with the generated token: %d, want 200", code)
	}
	if code := call(http.MethodPost, dispatch.ExecPath, "Bearer "+token); code != http.StatusAccepted {
		t.Errorf("POST %s with the generated token: %d, want 202", dispatch.ExecPath, code)
	}
	for _, p := range []string{"/healthz", "/metrics"} {
		if code := call(http.MethodGet, p, ""); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d, want 200 (for supervisors and Prometheus)", p, code)
		}
	}

	// Restarted on the same data dir: the same token.
	if err := rn.Stop(); err != nil {
		t.Fatal(err)
	}
	rn, err = startNode(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := cfg.API.CallerToken(cfg.DataDir); err != nil || again != token {
		t.Fatalf("token after a restart %q (%v), want the first one", again, err)
	}
	if code := call(http.MethodGet, "/status", "Bearer "+token); code != http.StatusOK {
		t.Errorf("GET /status with the token after a restart: %d, want 200", code)
	}
}

// An empty token lets nothing through (never "no token asked").
func TestRequireTokenEmptyRefusesAll(t *testing.T) {
	t.Parallel()
	h := requireToken("", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, auth := range []string{"", "Bearer ", "Bearer x"} {
		req, _ := http.NewRequest(http.MethodGet, "/status", nil)
		req.Header.Set("Authorization", auth)
		rec := &statusRecorder{header: http.Header{}}
		h.ServeHTTP(rec, req)
		if rec.code != http.StatusUnauthorized {
			t.Errorf("empty token, Authorization %q: %d, want 401", auth, rec.code)
		}
	}
}

type statusRecorder struct {
	header http.Header
	code   int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(code int)        { r.code = code }

// POST /v1/exec runs a task message only if it is its task's: the id must
// be its bot's and msgid's, and the task's record, once written, must name
// the same bot, message and chat. A message that borrows a task id for
// another chat or bot is refused, and the record is left as it was.
func TestExecRefusesAMessageThatIsNotItsRecords(t *testing.T) {
	t.Parallel()
	base, lc := apiNodeLC(t, apiSpec{Token: testToken})
	ctx := context.Background()
	rec := task.New("b", "m1", time.Now().UTC())
	rec.Chat, rec.User, rec.Question = "alice", "alice", "q"
	if _, err := lc.Open(ctx, rec); err != nil {
		t.Fatal(err)
	}
	exec := func(m task.Message) (int, string) {
		t.Helper()
		body, _ := json.Marshal(m)
		req, _ := http.NewRequest(http.MethodPost, base+dispatch.ExecPath, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got map[string]string
		json.NewDecoder(resp.Body).Decode(&got)
		return resp.StatusCode, got["error"]
	}
	good := task.MessageOf(rec)
	for _, c := range []struct {
		name string
		edit func(*task.Message)
		code int
		want string
	}{
		{"another chat", func(m *task.Message) { m.Chat = "mallory" }, http.StatusConflict, `chat "alice"`},
		{"another bot", func(m *task.Message) { m.Bot = "other" }, http.StatusBadRequest, "is not the id of bot"},
		{"another message", func(m *task.Message) { m.MsgID = "m2" }, http.StatusBadRequest, "is not the id of bot"},
		{"an id made up", func(m *task.Message) { m.TaskID = "t_0123456789abcdef01234567" }, http.StatusBadRequest, "is not the id of bot"},
	} {
		m := good
		c.edit(&m)
		code, why := exec(m)
		if code != c.code || !strings.Contains(why, c.want) || !strings.Contains(why, "refused") {
			t.Errorf("%s: %d %q, want %d with an error saying %q and refused", c.name, code, why, c.code, c.want)
		}
	}
	if r, err := lc.Get(ctx, rec.ID); err != nil || r.Exec != task.Queued || r.Attempt != 0 || r.Chat != "alice" {
		t.Fatalf("record after the refused calls: %+v %v, want it queued, attempt 0, chat alice", r, err)
	}
	// The task's own message runs.
	if code, why := exec(good); code != http.StatusAccepted {
		t.Fatalf("the task's own message: %d %q, want 202", code, why)
	}
}
