package serve

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/demoui"
	"github.com/rs/zerolog"
)

// The demo page is served only to a node whose WeCom is the simulator
// (its live view shows users' questions), and posting a user message asks
// for the node API's token like every write.
func TestDemoPageOnlyWithSimulatorAndBehindToken(t *testing.T) {
	cfg := config.Defaults()
	cfg.NodeID, cfg.Bots = "n1", []config.Bot{{ID: "b1", Secret: "s1"}}
	for _, u := range []string{"wss://openws.work.weixin.qq.com", ""} {
		cfg.WeCom.URL = u
		if (&Node{cfg: cfg, log: zerolog.Nop()}).demoPage() != nil {
			t.Errorf("wecom.url %q: demo page served to a node of real WeCom", u)
		}
	}
	cfg.WeCom.URL = "ws://127.0.0.1:1/"
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
	got, err := http.Get(srv.URL + demoui.Path + "api/cluster")
	if err != nil {
		t.Fatal(err)
	}
	got.Body.Close()
	if got.StatusCode != http.StatusOK || !strings.HasPrefix(got.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET cluster (read-only, no token): %s", got.Status)
	}
}
