package pipeline

import (
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// replyTo waits for the bot's reply to msgid and returns its content.
func (c *cluster) replyTo(chat, msgid string) string {
	c.t.Helper()
	var got string
	testwait.Eventually(c.t, waitLong, "reply to "+msgid, func() bool {
		for _, m := range c.bot(chat) {
			if m.ReplyTo == msgid && m.Finished {
				got = m.Content
				return true
			}
		}
		return false
	})
	return got
}

func (c *cluster) postAs(req wecomsim.MessageRequest) wecomsim.MessageResult {
	c.t.Helper()
	req.BotID = "b1"
	r, err := c.sim.PostMessage(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

// Bad input gets a clear reply and creates no task; nothing crashes.
func TestBadInputClearReplies(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) {
		cfg.Access.MaxQuestionBytes = 100
		cfg.Access.AllowUsers = []string{"alice", "bob"}
	})
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	for _, tc := range []struct {
		name string
		req  wecomsim.MessageRequest
		want string
	}{
		{"empty", wecomsim.MessageRequest{UserID: "alice", Text: "   "}, "请输入你的问题"},
		{"too long", wecomsim.MessageRequest{UserID: "alice", Text: strings.Repeat("长", 50)}, "100 字节以内"},
		{"unknown type", wecomsim.MessageRequest{UserID: "alice", RawMsgType: "sticker"}, "暂不支持 sticker"},
		{"huge unknown type", wecomsim.MessageRequest{UserID: "alice", RawMsgType: strings.Repeat("x", 100000)}, "暂不支持 " + strings.Repeat("x", 32) + "…"},
		{"broken image", wecomsim.MessageRequest{UserID: "alice", MsgType: "image", MediaPart: wecomsim.MediaPart{Fault: "padding"}}, "图片无法解密"},
		{"not allowed", wecomsim.MessageRequest{UserID: "mallory", Text: "let me in"}, "没有使用这个机器人的权限"},
		{"unknown command", wecomsim.MessageRequest{UserID: "bob", Text: "/frobnicate"}, "未知命令 /frobnicate"},
		{"help", wecomsim.MessageRequest{UserID: "bob", Text: "/help"}, "/stop"},
		{"status idle", wecomsim.MessageRequest{UserID: "bob", Text: "/status"}, "当前没有正在进行的任务"},
		{"new", wecomsim.MessageRequest{UserID: "bob", Text: "/new"}, "已开始新的对话"},
	} {
		sent := c.postAs(tc.req)
		chat := tc.req.UserID
		if got := c.replyTo(chat, sent.MsgID); !strings.Contains(got, tc.want) {
			t.Errorf("%s: reply %q, want it to contain %q", tc.name, got, tc.want)
		}
		// A message with files is recorded before its download; the
		// handling removes the record once it answered at receipt.
		testwait.Eventually(t, waitLong, tc.name+": no task record", func() bool { return c.record(n, sent.MsgID).ID == "" })
	}
	if s := n.node.Dispatch.Stats(); s.Queued != 0 {
		t.Fatalf("dispatched %d tasks for bad input", s.Queued)
	}
}

// Voice arrives transcribed and is asked like text.
func TestVoiceUsesTranscription(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.start("n1", nil)
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	c.postAs(wecomsim.MessageRequest{UserID: "alice", MsgType: "voice", Text: "spoken question"})
	testwait.Eventually(t, waitLong, "answered", func() bool { return answered(c.bot("alice"), "spoken question") == 1 })
}

// /stop cancels the running task within a second or so, the user is told,
// and the conversation takes a new question.
func TestStopCommand(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) { cfg.AI.Demo.AnswerTime = time.Minute })
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	long := c.post("alice", "a long one")
	testwait.Eventually(t, waitLong, "running", func() bool { return c.record(n, long.MsgID).Exec == task.Running })
	status := c.postAs(wecomsim.MessageRequest{UserID: "alice", Text: "/status"})
	if got := c.replyTo("alice", status.MsgID); !strings.Contains(got, "running") {
		t.Fatalf("/status: %q", got)
	}
	stop := c.postAs(wecomsim.MessageRequest{UserID: "alice", Text: "/stop"})
	if got := c.replyTo("alice", stop.MsgID); !strings.Contains(got, "已停止") {
		t.Fatalf("/stop: %q", got)
	}
	testwait.Eventually(t, waitLong, "canceled and delivered", func() bool {
		r := c.record(n, long.MsgID)
		return r.Exec == task.Canceled && r.Delivery == task.Delivered
	})
	// The user's stream ends with what was said so far and a note.
	if got := c.replyTo("alice", long.MsgID); !strings.Contains(got, "（已停止）") {
		t.Fatalf("stopped answer ends with %q", got)
	}
	next := c.post("alice", "next question")
	testwait.Eventually(t, waitLong, "next answered", func() bool {
		return c.record(n, next.MsgID).Exec == task.Running || c.record(n, next.MsgID).Exec == task.Succeeded
	})
}
