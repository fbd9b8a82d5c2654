package browser

import (
	"bytes"
	"context"
	"encoding/json"
	goimage "image"
	pngenc "image/png"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/demoui"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/chromedp/chromedp"
)

// The page shows an answer's images (fetched through its API) and its
// card, and a click on the card's button sends the bot a
// template_card_event. The simulator is a stand-in with a canned
// transcript: one answer with an image and a card, one uploaded file.
func TestPageShowsReplyImagesAndCards(t *testing.T) {
	tab := browser(t, context.Background())
	var pic bytes.Buffer
	_ = pngenc.Encode(&pic, goimage.NewRGBA(goimage.Rect(0, 0, 20, 10)))
	card := `{"card_type":"button_interaction","task_id":"t_1","main_title":{"title":"Useful?","desc":"the answer"},"button_list":[{"text":"Yes","key":"yes"},{"text":"No","key":"no"}]}`
	entries := []wecomsim.TranscriptEntry{
		{From: "user", MsgID: "u1", Kind: "text", Content: "an image and a card", Finished: true},
		{From: "bot", MsgID: "final", ReplyTo: "u1", Kind: "stream", Content: "You asked: an image and a card", Finished: true,
			Images: 1, ImageIDs: []string{"img1"}, Card: card},
		{From: "bot", MsgID: "file", Kind: "file", Content: "media_1", Finished: true},
	}
	var mu sync.Mutex
	var clicks []map[string]string
	sim := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/control/transcript":
			json.NewEncoder(w).Encode(map[string]any{"messages": entries})
		case "/control/images":
			if r.URL.Query().Get("id") != "img1" {
				http.Error(w, `{"error":"no such image"}`, http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "image/png")
			w.Write(pic.Bytes())
		case "/control/events":
			var ev map[string]string
			json.NewDecoder(r.Body).Decode(&ev)
			mu.Lock()
			clicks = append(clicks, ev)
			mu.Unlock()
			json.NewEncoder(w).Encode(map[string]any{"msgid": "e1", "delivered": true})
		default:
			http.Error(w, `{"error":"unexpected request `+r.URL.String()+`"}`, http.StatusNotFound)
		}
	}))
	defer sim.Close()
	page := httptest.NewServer(demoui.Handler(demoui.Config{NodeID: "n1", Bots: []string{"b1"}, Sim: sim.URL,
		View: func(context.Context) demoui.View { return demoui.View{Node: "n1"} }}))
	defer page.Close()

	if err := chromedp.Do(tab, chromedp.Navigate(page.URL+demoui.Path), chromedp.WaitVisible(chromedp.CSS(`.msg.bot[data-msgid="file"]`))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	poll(t, tab, "the answer's image loaded", `() => { const i = document.querySelector('.msg.bot[data-msgid="final"] img.reply-image'); return !!i && i.complete && i.naturalWidth === 20 }`)
	poll(t, tab, "the card with its title and buttons", `() => { const c = document.querySelector('.msg.bot[data-msgid="final"] .card[data-card-task="t_1"]'); return !!c && c.textContent.includes("Useful?") && c.querySelectorAll("button.card-button").length === 2 }`)
	poll(t, tab, "the file sent", `() => document.querySelector('.msg.bot[data-msgid="file"]').textContent.includes("file (media_id media_1)")`)
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(`.msg.bot[data-msgid="final"] button[data-key="no"]`))); err != nil {
		t.Fatalf("click: %v", err)
	}
	testwait.Eventually(t, wait, "the click posted", func() bool { mu.Lock(); defer mu.Unlock(); return len(clicks) > 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(clicks) != 1 || clicks[0]["eventtype"] != "template_card_event" || clicks[0]["task_id"] != "t_1" || clicks[0]["event_key"] != "no" || clicks[0]["user_id"] != "alice" {
		t.Fatalf("clicks %v", clicks)
	}
}
