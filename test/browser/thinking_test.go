package browser

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/botctl/botctl/pkg/demoui"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/chromedp/chromedp"
)

// The page shows a stream's <think> block as WeCom does: folded (a
// closed <details>) above the answer, the tags themselves not shown. The
// simulator is a stand-in with a canned transcript.
func TestPageFoldsTheThinking(t *testing.T) {
	tab := browser(t, context.Background())
	entries := []wecomsim.TranscriptEntry{
		{From: "user", MsgID: "u1", Kind: "text", Content: "q", Finished: true},
		{From: "bot", MsgID: "final", ReplyTo: "u1", Kind: "stream", Content: "<think>Let me look.\n🔧 search: done</think>\n\nThe answer.", Finished: true},
	}
	sim := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/control/transcript" {
			http.Error(w, `{"error":"unexpected request `+r.URL.String()+`"}`, http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"messages": entries})
	}))
	defer sim.Close()
	page := httptest.NewServer(demoui.Handler(demoui.Config{NodeID: "n1", Bots: []string{"b1"}, Sim: sim.URL,
		View: func(context.Context) demoui.View { return demoui.View{Node: "n1"} }}))
	defer page.Close()

	if err := chromedp.Do(tab, chromedp.Navigate(page.URL+demoui.Path), chromedp.WaitVisible(chromedp.CSS(`.msg.bot[data-msgid="final"]`))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	poll(t, tab, "the thinking folded above the answer, without its tags", `() => {
		const m = document.querySelector('.msg.bot[data-msgid="final"]');
		const d = m && m.querySelector('details.thinking');
		return !!d && !d.open && d.textContent.includes("🔧 search: done") && d.textContent.includes("Let me look.") &&
			m.textContent.includes("The answer.") && !m.textContent.includes("<think>") && !m.textContent.includes("</think>") &&
			!!(d.compareDocumentPosition(m.querySelector(".timeline")) & Node.DOCUMENT_POSITION_FOLLOWING) }`)
}
