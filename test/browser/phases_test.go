package browser

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/demoui"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/chromedp/chromedp"
)

// The page names every kind of frame the pusher writes, with the node's
// own texts: the receipt, progress, the heartbeat line, a stream closed at
// its window with the note, the full answer pushed, a final frame, an
// expired stream. The transcript is canned (a simulator stand-in that
// answers GET /control/transcript), so every kind is on the page at once.
func TestPageLabelsEveryFrame(t *testing.T) {
	tab := browser(t, context.Background())
	push := config.Defaults().Push
	entries := []wecomsim.TranscriptEntry{
		{From: "user", MsgID: "u1", Kind: "text", Content: "hello", Finished: true},
		{From: "bot", MsgID: "receipt", ReplyTo: "u1", Kind: "stream", Content: access.DefaultReceipt},
		{From: "bot", MsgID: "progress", ReplyTo: "u1", Kind: "stream", Content: "You asked: hello\n\n1. So far"},
		{From: "bot", MsgID: "heartbeat", ReplyTo: "u1", Kind: "stream", Content: "You asked: hello\n\n已进行 1 分 05 秒，仍在处理中"},
		{From: "bot", MsgID: "truncated", ReplyTo: "u1", Kind: "stream", Content: "You asked: hello\n\n" + push.TruncatedNote, Finished: true},
		{From: "bot", MsgID: "pushed", Kind: "markdown", Content: "You asked: hello\n\nthe whole answer", Finished: true},
		{From: "bot", MsgID: "final", ReplyTo: "u1", Kind: "stream", Content: "You asked: hello\n\ndone", Finished: true},
		{From: "bot", MsgID: "expired", ReplyTo: "u1", Kind: "stream", Content: "You asked: hello", Expired: true},
	}
	sim := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/control/transcript" || r.URL.Query().Get("bot_id") != "b1" || r.URL.Query().Get("chat") != "alice" {
			http.Error(w, `{"error":"unexpected request `+r.URL.String()+`"}`, http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"messages": entries})
	}))
	defer sim.Close()
	page := httptest.NewServer(demoui.Handler(demoui.Config{NodeID: "n1", Bots: []string{"b1"}, Sim: sim.URL,
		Texts: demoui.Texts{Receipt: access.DefaultReceipt, HeartbeatLine: push.HeartbeatLine, QueuedLine: push.QueuedLine, TruncatedNote: push.TruncatedNote},
		View:  func(context.Context) demoui.View { return demoui.View{Node: "n1"} }}))
	defer page.Close()

	if err := chromedp.Do(tab, chromedp.Navigate(page.URL+demoui.Path), chromedp.WaitVisible(chromedp.CSS(`.msg.bot[data-msgid="expired"]`))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	phases, err := chromedp.Run(tab, chromedp.Evaluate[map[string]string](
		`Object.fromEntries([...document.querySelectorAll('.msg.bot')].map(e => [e.dataset.msgid, e.dataset.phase]))`))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries[1:] {
		if phases[e.MsgID] != e.MsgID {
			t.Errorf("frame %q shown as %q, want %q (all: %v)", e.Content, phases[e.MsgID], e.MsgID, phases)
		}
	}
}
