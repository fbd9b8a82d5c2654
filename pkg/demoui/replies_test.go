package demoui

import (
	"bytes"
	"context"
	"encoding/json"
	stdimage "image"
	"image/png"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
)

// The page shows what a bot answered beyond text: the images of its
// finishing frame are fetched through the page's API, its card comes
// with the transcript, and a click on a card's button reaches the bot as
// a template_card_event.
func TestRepliesImagesAndCardClicks(t *testing.T) {
	var simBase string
	base, _ := page(t, func(c *Config) { simBase = c.Sim })
	var pic bytes.Buffer
	_ = png.Encode(&pic, stdimage.NewGray(stdimage.Rect(0, 0, 3, 3)))
	type cb struct {
		reqID string
		ev    *wecom.EventCallback
	}
	msgs, events := make(chan string, 4), make(chan cb, 4)
	url := "ws" + strings.TrimPrefix(simBase, "http") + "/"
	conn, err := wecom.Dial(context.Background(), wecom.Config{URL: url, BotID: "b1", Secret: "s1", Logger: zerolog.Nop()},
		handler{msg: func(reqID string) { msgs <- reqID }, event: func(reqID string, ev *wecom.EventCallback) { events <- cb{reqID, ev} }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { conn.Close(); <-conn.Done() }()
	if r := do(t, "POST", base+Path+"api/messages", "application/json", `{"bot":"b1","user":"alice","text":"show me"}`); r.code != http.StatusOK {
		t.Fatalf("post: %d %v", r.code, r.body)
	}
	reqID := <-msgs
	card := json.RawMessage(`{"card_type":"button_interaction","task_id":"t_1","main_title":{"title":"Useful?"},"button_list":[{"text":"Yes","key":"yes"}]}`)
	s := wecom.Stream{ID: "s1", Content: "here", Finish: true, MsgItem: wecom.ReplyImages(pic.Bytes())}
	if err := conn.Reply(context.Background(), reqID, &wecom.RespondBody{MsgType: wecom.MsgTypeStreamWithTemplateCard, Stream: &s, TemplateCard: card}); err != nil {
		t.Fatal(err)
	}
	tr := do(t, "GET", base+Path+"api/transcript?bot=b1&chat=alice", "", "")
	entries, _ := tr.body["messages"].([]any)
	if len(entries) != 2 {
		t.Fatalf("transcript %v", tr.body)
	}
	bot := entries[1].(map[string]any)
	ids, _ := bot["image_ids"].([]any)
	if len(ids) != 1 || !strings.Contains(bot["card"].(string), `"t_1"`) {
		t.Fatalf("bot entry %v", bot)
	}
	resp, err := http.Get(base + Path + "api/images?id=" + ids[0].(string))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/png" || !bytes.Equal(got, pic.Bytes()) {
		t.Fatalf("image: %s %s, %d bytes", resp.Status, resp.Header.Get("Content-Type"), len(got))
	}
	if r := do(t, "GET", base+Path+"api/images?id=../x", "", ""); r.code != http.StatusBadRequest {
		t.Fatalf("a bad id: %d", r.code)
	}
	r := do(t, "POST", base+Path+"api/clicks", "application/json", `{"bot":"b1","user":"alice","task_id":"t_1","event_key":"yes"}`)
	if r.code != http.StatusOK || r.body["delivered"] != true {
		t.Fatalf("click: %d %v", r.code, r.body)
	}
	select {
	case e := <-events:
		if e.ev.Event.EventType != wecom.EventTemplateCardEvent || e.ev.Event.TaskID != "t_1" || e.ev.Event.EventKey != "yes" {
			t.Fatalf("event %+v", e.ev.Event)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no template_card_event")
	}
	if r := do(t, "POST", base+Path+"api/clicks", "application/json", `{"bot":"b1","user":"alice","event_key":"yes"}`); r.code != http.StatusBadRequest {
		t.Fatalf("a click without task_id: %d", r.code)
	}
}

type handler struct {
	msg   func(reqID string)
	event func(reqID string, ev *wecom.EventCallback)
}

func (h handler) Message(_ *wecom.Conn, reqID string, _ *wecom.MsgCallback) { h.msg(reqID) }
func (h handler) Event(_ *wecom.Conn, reqID string, ev *wecom.EventCallback) {
	h.event(reqID, ev)
}
