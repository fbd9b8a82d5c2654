package browser

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

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

// On a node with api.token_file, the page's chat (the transcript it polls
// and its post) is refused until the person gives the token: the page
// then shows the token field and the node's error, and sends the token
// with the next post and every transcript read after it.
func TestPageAsksForTheToken(t *testing.T) {
	tab := browser(t, context.Background())
	const token = "0123456789abcdef0123456789abcdef"
	posted := make(chan string, 4)
	var transcripts atomic.Int64 // reads that passed the token check
	sim := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/control/messages":
			var m wecomsim.MessageRequest
			json.NewDecoder(r.Body).Decode(&m)
			posted <- m.Text
			json.NewEncoder(w).Encode(wecomsim.MessageResult{MsgID: "m1", Seq: 1, Delivered: true})
		case "/control/transcript":
			transcripts.Add(1)
			json.NewEncoder(w).Encode(map[string]any{"messages": []wecomsim.TranscriptEntry{}})
		default:
			http.NotFound(w, r)
		}
	}))
	defer sim.Close()
	protect := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+token {
				w.WriteHeader(http.StatusUnauthorized)
				w.Write([]byte(`{"error":"missing or wrong bearer token"}`))
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	page := httptest.NewServer(demoui.Handler(demoui.Config{NodeID: "n1", Bots: []string{"b1"}, Sim: sim.URL, Protect: protect,
		View: func(context.Context) demoui.View { return demoui.View{Node: "n1"} }}))
	defer page.Close()

	if err := chromedp.Do(tab, chromedp.Navigate(page.URL+demoui.Path), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	ask(t, tab, "hello")
	poll(t, tab, "the token field and the node's refusal", `() => !document.querySelector("#token-row").hidden && document.querySelector("#chat-error").textContent.includes("bearer token")`)
	select {
	case text := <-posted:
		t.Fatalf("%q reached the simulator without the token", text)
	default:
	}
	if n := transcripts.Load(); n != 0 {
		t.Fatalf("%d transcript reads reached the simulator without the token", n)
	}
	if err := chromedp.Do(tab, chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#send"))); err != nil {
		t.Fatal(err)
	}
	select {
	case text := <-posted:
		if text != "hello" {
			t.Fatalf("the simulator got %q, want hello", text)
		}
	case <-time.After(wait):
		t.Fatal("the post with the token did not reach the simulator")
	}
	poll(t, tab, "the error cleared", `() => document.querySelector("#chat-error").hidden`)
	deadline := time.Now().Add(wait)
	for transcripts.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no transcript read with the token reached the simulator: the page does not send it with its GET")
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not an assertion
	}
	poll(t, tab, "the error still cleared with the transcript polled", `() => document.querySelector("#chat-error").hidden`)
}
