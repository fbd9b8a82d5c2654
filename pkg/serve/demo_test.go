package serve

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/demoui"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
)

// The demo page is served only to a node whose WeCom is the simulator
// (its live view shows users' questions); posting a user message and
// reading a chat's transcript ask for the node API's token like every
// write; the live view does not.
func TestDemoPageOnlyWithSimulatorAndBehindToken(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.NodeID, cfg.Bots = "n1", []config.Bot{{ID: "b1", Secret: "s1"}}
	for _, u := range []string{"wss://openws.work.weixin.qq.com", ""} {
		cfg.WeCom.URL = u
		if (&Node{cfg: cfg, log: zerolog.Nop()}).demoPage() != nil {
			t.Errorf("wecom.url %q: demo page served to a node of real WeCom", u)
		}
	}
	sim, addr := startSimServer(t)
	cfg.WeCom.URL = "ws://" + addr + "/"
	page := (&Node{cfg: cfg, token: testToken, log: zerolog.Nop()}).demoPage()
	if page == nil {
		t.Fatal("no demo page with a simulator URL")
	}
	srv := httptest.NewServer(page)
	defer srv.Close()
	resp := post(t, srv.URL+demoui.Path+"api/messages", "", []byte(`{"bot":"b1","user":"a","text":"hi"}`))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("post without the token: %s, want 401", resp.Status)
	}
	if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "alice", Text: "a private question"}); err != nil {
		t.Fatal(err)
	}
	transcript := func(auth string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+demoui.Path+"api/transcript?bot=b1&chat=alice", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	for _, auth := range []string{"", "Bearer wrong-token-0123456789abc"} {
		if resp, body := transcript(auth); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "private") {
			t.Fatalf("GET transcript with Authorization %q: %s %s, want 401 without the chat", auth, resp.Status, body)
		}
	}
	if resp, body := transcript("Bearer " + testToken); resp.StatusCode != http.StatusOK || !strings.Contains(body, "a private question") {
		t.Fatalf("GET transcript with the token: %s %s, want 200 with alice's question", resp.Status, body)
	}
	got, err := http.Get(srv.URL + demoui.Path + "api/cluster")
	if err != nil {
		t.Fatal(err)
	}
	got.Body.Close()
	if got.StatusCode != http.StatusOK || !strings.HasPrefix(got.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET cluster (read-only, no token): %s", got.Status)
	}
}
