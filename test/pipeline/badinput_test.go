package pipeline

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// Issue 26 item 6, the kinds of bad input no other test plays, seen from
// WeCom's side: each message gets one clear reply (or its answer, when
// botctl can read part of it) and never a second, not even when WeCom
// redelivers it; the conversation is not locked (its next question is
// answered); the connection holds (no reconnect, no kick); and an event
// of an unknown type gets nothing. The kinds TestBadInputClearReplies and
// TestBadMediaRepliesWhyAndLocksNothing play are not repeated here.
func TestBadInputOfEveryKindIsHarmless(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) { cfg.Media.MaxBytes = 2048 })
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	before, _ := c.sim.Stats("b1")

	var images []wecomsim.MixedPart
	for range 21 { // one more than media.MaxItems
		images = append(images, wecomsim.MixedPart{MsgType: "image"})
	}
	type kase struct {
		name string
		req  wecomsim.MessageRequest
		want string
		task bool // botctl reads part of it: answered
	}
	var sent []wecomsim.MessageResult
	var cases []kase
	var chats []string
	for i, tc := range []kase{
		// Huge.
		{"huge text", wecomsim.MessageRequest{Text: strings.Repeat("x", 1<<20)}, "8000 字节以内", false},
		{"image too big", wecomsim.MessageRequest{MsgType: "image", MediaPart: wecomsim.MediaPart{Width: 800, Height: 800}}, "图片太大，超过了 2 KB", false},
		{"video too big", wecomsim.MessageRequest{MsgType: "video", MediaPart: wecomsim.MediaPart{Size: 5000}}, "视频太大，超过了 2 KB", false},
		{"quoted file too big", wecomsim.MessageRequest{Text: "and this?", Quote: &wecomsim.QuotePart{MsgType: "file",
			MediaPart: wecomsim.MediaPart{Size: 5000}}}, "文件太大，超过了 2 KB", false},
		{"too many files", wecomsim.MessageRequest{MsgType: "mixed", Items: images}, "最多可以带 20 个图片或文件", false},
		// Malformed.
		{"aeskey not base64", wecomsim.MessageRequest{MsgType: "image", MediaPart: wecomsim.MediaPart{Fault: "key_not_base64"}}, "图片无法解密", false},
		{"url expired", wecomsim.MessageRequest{MsgType: "file", MediaPart: wecomsim.MediaPart{Fault: "expired"}}, "文件的下载链接已失效", false},
		{"quoted mixed image expired", wecomsim.MessageRequest{Text: "and this?", Quote: &wecomsim.QuotePart{MsgType: "mixed",
			Items: []wecomsim.MixedPart{{MsgType: "image", MediaPart: wecomsim.MediaPart{Fault: "expired"}}}}}, "图片的下载链接已失效", false},
		{"mixed item of an unknown type alone", wecomsim.MessageRequest{MsgType: "mixed", Items: []wecomsim.MixedPart{{RawMsgType: "sticker"}}},
			"请输入你的问题", false},
		{"mixed item of an unknown type beside text", wecomsim.MessageRequest{MsgType: "mixed", Items: []wecomsim.MixedPart{
			{MsgType: "text", Text: "what is this sticker?"}, {RawMsgType: "sticker"}}}, "You asked: what is this sticker?", true},
		// Unknown type, in a group.
		{"unknown type in a group", wecomsim.MessageRequest{ChatType: "group", ChatID: "g-bad", RawMsgType: "location"}, "暂不支持 location", false},
	} {
		// A conversation each: one conversation's send budget (push.budget,
		// 20 a minute) would hold back the replies of the later cases.
		tc.req.UserID = fmt.Sprintf("user%d", i)
		chat := tc.req.UserID
		if tc.req.ChatID != "" {
			chat = tc.req.ChatID
		}
		m := c.postAs(tc.req)
		if got := c.replyTo(chat, m.MsgID); !strings.Contains(got, tc.want) {
			t.Errorf("%s: reply %q, want it to contain %q", tc.name, got, tc.want)
		}
		if tc.task {
			if r := c.record(n, m.MsgID); r.ID == "" {
				t.Errorf("%s: no task, want one", tc.name)
			}
		} else {
			// A message with files is recorded before its download and
			// the record removed once its refusal went out: gone soon
			// after the reply, never dispatched.
			testwait.Eventually(t, waitLong, tc.name+": no task left", func() bool { return c.record(n, m.MsgID).ID == "" })
		}
		if tc.task {
			testwait.Eventually(t, waitLong, tc.name+" delivered", func() bool { return c.record(n, m.MsgID).Delivery == task.Delivered })
		}
		// Repeated: WeCom redelivers it; nothing more is sent.
		c.postAs(wecomsim.MessageRequest{UserID: tc.req.UserID, MsgID: m.MsgID})
		// Not locked: the conversation's next question is answered.
		q := "after " + tc.name
		next := c.postAs(wecomsim.MessageRequest{UserID: tc.req.UserID, ChatType: tc.req.ChatType, ChatID: tc.req.ChatID, Text: q})
		testwait.Eventually(t, waitLong, q+" answered", func() bool { return answered(c.bot(chat), q) == 1 })
		if r := c.record(n, next.MsgID); r.Exec != task.Succeeded {
			t.Errorf("%s: the next question's task %+v", tc.name, r)
		}
		if k := countReplies(c.bot(chat), m.MsgID); k != 1 {
			t.Errorf("%s: %d replies after WeCom redelivered it, want 1: %+v", tc.name, k, c.bot(chat))
		}
		sent, cases, chats = append(sent, m), append(cases, tc), append(chats, chat)
	}

	// An event of a type botctl does not know: nothing is sent.
	ev, err := c.sim.PostEvent(wecomsim.EventRequest{BotID: "b1", UserID: "judy", EventType: "some_future_event"})
	if err != nil || !ev.Delivered {
		t.Fatalf("event: %+v %v", ev, err)
	}
	c.post("judy", "and after the event?")
	testwait.Eventually(t, waitLong, "judy answered", func() bool { return answered(c.bot("judy"), "and after the event?") == 1 })

	time.Sleep(time.Second) // a second reply to any of them would come now
	for i, m := range sent {
		if k := countReplies(c.bot(chats[i]), m.MsgID); k != 1 {
			t.Errorf("%s: %d replies, want 1", cases[i].name, k)
		}
	}
	if k := countReplies(c.bot("judy"), ev.MsgID); k != 0 {
		t.Errorf("the unknown event got %d replies", k)
	}
	after, _ := c.sim.Stats("b1")
	if !after.Connected || after.Connections != before.Connections || after.Kicks != before.Kicks || after.QuotaRejections != 0 {
		t.Fatalf("the connection did not hold: before %+v, after %+v", before, after)
	}
	if s := n.node.Access.Stats(); s.Duplicates != int64(len(sent)) {
		t.Errorf("access counted %d duplicates, want %d (one per redelivery)", s.Duplicates, len(sent))
	}
}

// A message answered without a task (a failed download, an unknown type,
// a question too long), and one answered by its task, redelivered by
// WeCom after a failover to a leader whose dedupe memory never saw them:
// no second reply, no second download, no second task.
func TestRedeliveredAfterAFailoverRepliesOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := c.start("a", nil)
	testwait.Eventually(t, waitLong, "a connected", c.connected)
	b := c.start("b", nil)
	// Created a minute ago: a redelivery to the next connection is not
	// fresh (created before it was subscribed), as WeCom's would be.
	old := time.Now().Add(-time.Minute).Unix()
	var sent []wecomsim.MessageResult
	for i, req := range []wecomsim.MessageRequest{
		{MsgType: "file", MediaPart: wecomsim.MediaPart{Fault: "expired"}},
		{RawMsgType: "location"},
		{Text: strings.Repeat("x", 9000)},
		{Text: "a plain question"},
	} {
		req.UserID, req.CreateTime = fmt.Sprintf("user%d", i), old
		m := c.postAs(req)
		c.replyTo(req.UserID, m.MsgID)
		sent = append(sent, m)
		if req.Text == "a plain question" {
			testwait.Eventually(t, waitLong, "the question's task delivered", func() bool { return c.record(a, m.MsgID).Delivery == task.Delivered })
		}
	}
	before, _ := c.sim.Stats("b1")
	a.stop()
	testwait.Eventually(t, waitLong, "b connected", func() bool { s, _ := c.sim.Stats("b1"); return s.Connected && s.Connections > before.Connections })
	for i, m := range sent {
		c.postAs(wecomsim.MessageRequest{UserID: fmt.Sprintf("user%d", i), MsgID: m.MsgID})
	}
	for i := range sent {
		q := fmt.Sprintf("after the failover %d", i)
		c.post(fmt.Sprintf("user%d", i), q)
		testwait.Eventually(t, waitLong, q+" answered", func() bool { return answered(c.bot(fmt.Sprintf("user%d", i)), q) == 1 })
	}
	time.Sleep(time.Second) // a second reply would come now
	for i, m := range sent {
		if k := countReplies(c.bot(fmt.Sprintf("user%d", i)), m.MsgID); k != 1 {
			t.Errorf("message %d: %d replies, want 1: %+v", i, k, c.bot(fmt.Sprintf("user%d", i)))
		}
	}
	if r := c.record(b, sent[3].MsgID); r.Attempt != 1 || r.Exec != task.Succeeded {
		t.Errorf("the question's task after its redelivery: %+v", r)
	}
	after, _ := c.sim.Stats("b1")
	if after.FinishedStreamFrames != before.FinishedStreamFrames {
		t.Errorf("botctl replied again on a finished stream (WeCom refused %d frames)", after.FinishedStreamFrames-before.FinishedStreamFrames)
	}
	if after.MediaExpired != before.MediaExpired {
		t.Errorf("the expired file was fetched again: %d → %d", before.MediaExpired, after.MediaExpired)
	}
	if s := b.node.Access.Stats(); s.Duplicates != int64(len(sent)) {
		t.Errorf("b took %d redeliveries for duplicates, want %d: %+v", s.Duplicates, len(sent), s)
	}
}
