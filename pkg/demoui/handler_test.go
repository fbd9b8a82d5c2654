package demoui

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
)

// page serves Handler with a real simulator behind it (bot b1) and
// returns the server's URL and the simulator.
func page(t *testing.T, mutate func(*Config)) (string, *wecomsim.Server) {
	t.Helper()
	sim := wecomsim.New(wecomsim.Config{Logger: zerolog.Nop()})
	if err := sim.AddBot("b1", "s1"); err != nil {
		t.Fatal(err)
	}
	simSrv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { sim.Close(); simSrv.Close() })
	cfg := Config{NodeID: "n1", Bots: []string{"b1"}, Sim: simSrv.URL,
		Texts: Texts{Receipt: "got it", HeartbeatLine: "已进行 %d 分 %02d 秒，仍在处理中", TruncatedNote: "(more later)"},
		View:  func(context.Context) View { return View{Node: "n1", Errors: []string{}} }}
	if mutate != nil {
		mutate(&cfg)
	}
	srv := httptest.NewServer(Handler(cfg))
	t.Cleanup(srv.Close)
	return srv.URL, sim
}

type reply struct {
	code int
	body map[string]any
}

func do(t *testing.T, method, url, contentType, body string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{code: resp.StatusCode}
	json.Unmarshal(raw, &r.body)
	return r
}

// Bad input gets a 4xx whose error says what to send instead; nothing
// reaches the simulator.
func TestBadInputIsRefusedClearly(t *testing.T) {
	base, sim := page(t, nil)
	msgs := base + Path + "api/messages"
	const jsonCT = "application/json"
	cases := []struct {
		name, method, url, ct, body string
		header                      []string
		code                        int
		says                        string
	}{
		{"form body", "POST", msgs, "application/x-www-form-urlencoded", "bot=b1&user=a&text=hi", nil, 415, "Content-Type: application/json"},
		{"no content type", "POST", msgs, "", `{"bot":"b1","user":"a","text":"hi"}`, nil, 415, "application/json"},
		{"other site", "POST", msgs, jsonCT, `{"bot":"b1","user":"a","text":"hi"}`, []string{"Origin", "http://evil.example"}, 403, "own page"},
		{"not JSON", "POST", msgs, jsonCT, `hello`, nil, 400, `want {"bot"`},
		{"unknown field", "POST", msgs, jsonCT, `{"bot":"b1","user":"a","text":"hi","chat_id":"x"}`, nil, 400, "unknown field"},
		{"no bot", "POST", msgs, jsonCT, `{"user":"a","text":"hi"}`, nil, 400, "bot is required"},
		{"other bot", "POST", msgs, jsonCT, `{"bot":"b2","user":"a","text":"hi"}`, nil, 404, "use one of [b1]"},
		{"no user", "POST", msgs, jsonCT, `{"bot":"b1","text":"hi"}`, nil, 400, "user"},
		{"bad user", "POST", msgs, jsonCT, `{"bot":"b1","user":"a b/c","text":"hi"}`, nil, 400, "letters, digits"},
		{"empty text", "POST", msgs, jsonCT, `{"bot":"b1","user":"a","text":"  "}`, nil, 400, "type a question"},
		{"long text", "POST", msgs, jsonCT, `{"bot":"b1","user":"a","text":"` + strings.Repeat("x", maxText+1) + `"}`, nil, 400, "at most 4000 bytes"},
		{"GET messages", "GET", msgs, "", "", nil, 405, "use POST"},
		{"unknown endpoint", "GET", base + Path + "api/nope", "", "", nil, 404, "POST api/messages"},
		{"transcript without chat", "GET", base + Path + "api/transcript?bot=b1", "", "", nil, 400, "chat"},
		{"transcript of another bot", "GET", base + Path + "api/transcript?bot=zz&chat=a", "", "", nil, 404, "not served by this node"},
		{"POST cluster", "POST", base + Path + "api/cluster", jsonCT, "{}", nil, 405, "use GET"},
	}
	for _, c := range cases {
		r := do(t, c.method, c.url, c.ct, c.body, c.header...)
		msg, _ := r.body["error"].(string)
		if r.code != c.code || !strings.Contains(msg, c.says) {
			t.Errorf("%s: %d %q, want %d with an error saying %q", c.name, r.code, msg, c.code, c.says)
		}
	}
	if st, _ := sim.Stats("b1"); len(sim.Transcript("b1", "a")) != 0 || st.Undelivered != 0 {
		t.Fatalf("a refused request reached the simulator: %+v", sim.Transcript("b1", "a"))
	}
}

// A good message reaches the simulator as a user's, and the transcript
// comes back through the page's API; same-origin posts pass.
func TestMessageThroughTheSimulator(t *testing.T) {
	base, _ := page(t, nil)
	host := strings.TrimPrefix(base, "http://")
	r := do(t, "POST", base+Path+"api/messages", "application/json", `{"bot":"b1","user":"alice","text":"你好 botctl"}`, "Origin", "http://"+host)
	if r.code != http.StatusOK || r.body["msgid"] == "" {
		t.Fatalf("post: %d %v", r.code, r.body)
	}
	if r.body["delivered"] != false {
		t.Fatalf("delivered with no bot connected: %v", r.body)
	}
	tr := do(t, "GET", base+Path+"api/transcript?bot=b1&chat=alice", "", "")
	msgs, _ := tr.body["messages"].([]any)
	if tr.code != http.StatusOK || len(msgs) != 1 || msgs[0].(map[string]any)["content"] != "你好 botctl" {
		t.Fatalf("transcript: %d %v", tr.code, tr.body)
	}
}

// Without a simulator the chat answers 409 and says why; the config says
// the chat is off. The write and the transcript go through Protect.
func TestChatOffAndProtected(t *testing.T) {
	base, _ := page(t, func(c *Config) { c.Sim = "" })
	body := `{"bot":"b1","user":"a","text":"hi"}`
	if r := do(t, "POST", base+Path+"api/messages", "application/json", body); r.code != http.StatusConflict || !strings.Contains(r.body["error"].(string), "serve --demo") {
		t.Fatalf("no simulator: %d %v", r.code, r.body)
	}
	if r := do(t, "GET", base+Path+"api/transcript?bot=b1&chat=a", "", ""); r.code != http.StatusConflict {
		t.Fatalf("transcript, no simulator: %d %v", r.code, r.body)
	}
	if r := do(t, "GET", base+Path+"api/config", "", ""); r.body["chat"] != false || r.body["chat_off"] == "" {
		t.Fatalf("config: %v", r.body)
	}

	guarded, _ := page(t, func(c *Config) {
		c.Protect = func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeError(w, http.StatusUnauthorized, "token please") })
		}
	})
	if r := do(t, "POST", guarded+Path+"api/messages", "application/json", body); r.code != http.StatusUnauthorized {
		t.Fatalf("protected post: %d %v", r.code, r.body)
	}
	// The transcript shows what users asked and were answered: protected
	// like the post. The configuration and the live view are not.
	if r := do(t, "GET", guarded+Path+"api/transcript?bot=b1&chat=a", "", ""); r.code != http.StatusUnauthorized {
		t.Fatalf("protected transcript: %d %v", r.code, r.body)
	}
	for _, api := range []string{"config", "cluster"} {
		if r := do(t, "GET", guarded+Path+"api/"+api, "", ""); r.code != http.StatusOK {
			t.Fatalf("GET api/%s is not behind the token: %d %v", api, r.code, r.body)
		}
	}
}

// A simulator that does not answer is a 502 naming it.
func TestSimulatorDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	base, _ := page(t, func(c *Config) { c.Sim = dead })
	r := do(t, "POST", base+Path+"api/messages", "application/json", `{"bot":"b1","user":"a","text":"hi"}`)
	if r.code != http.StatusBadGateway || !strings.Contains(r.body["error"].(string), dead) {
		t.Fatalf("simulator down: %d %v", r.code, r.body)
	}
}

// The page loads nothing from elsewhere: the machine may have no internet.
func TestPageIsSelfContained(t *testing.T) {
	base, _ := page(t, nil)
	for _, f := range []string{"", "app.js", "style.css"} {
		resp, err := http.Get(base + Path + f)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s%s: %s", Path, f, resp.Status)
		}
	}
	external := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?(https?:)?//|@import`)
	fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := static.ReadFile(p)
		if m := external.Find(b); m != nil {
			t.Errorf("%s refers to another site (%q): embed it instead", p, m)
		}
		return nil
	})
}

func TestLinePattern(t *testing.T) {
	re := regexp.MustCompile(linePattern("已进行 %d 分 %02d 秒，仍在处理中", "queued %d:%02d (100%%)"))
	for _, s := range []string{"已进行 0 分 05 秒，仍在处理中", "queued 1:02 (100%)"} {
		if !re.MatchString(s) {
			t.Errorf("%q not matched by %s", s, re)
		}
	}
	if re.MatchString("已进行 分 秒") || regexp.MustCompile(linePattern()).MatchString("x") {
		t.Error("pattern matches too much")
	}
}

func TestSimulatorURL(t *testing.T) {
	for in, want := range map[string]string{
		"ws://127.0.0.1:8390/":                  "http://127.0.0.1:8390",
		"wss://openws.work.weixin.qq.com":       "",
		"":                                      "",
		"http://127.0.0.1:8390":                 "",
		"ws://user:pw@127.0.0.1:8390/?x=1#frag": "http://127.0.0.1:8390",
	} {
		if got := SimulatorURL(in); got != want {
			t.Errorf("SimulatorURL(%q) = %q, want %q", in, got, want)
		}
	}
}
