package pipeline

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// downloads is how many media GETs the simulator served.
func (c *cluster) downloads() int64 {
	st, _ := c.sim.Stats("b1")
	return st.MediaDownloads
}

// A user sends an image, a mixed message and a question quoting a file to
// `serve --demo`: the leader downloads and decrypts each file at
// receipt, the worker hands them to the backend, and the demo answer the
// user sees names every one (kind, MIME type, bytes, pixels). The task
// records carry the references; the worker's temp files are gone after.
func TestMediaReachesTheAnswer(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where the worker copies the files
	c := newCluster(t)
	n := c.start("n1", nil)
	testwait.Eventually(t, waitLong, "leader connected", c.connected)

	img := c.postAs(wecomsim.MessageRequest{UserID: "alice", MsgType: "image", MediaPart: wecomsim.MediaPart{Width: 64, Height: 48}})
	got := c.replyTo("alice", img.MsgID)
	size := len(mustMedia(t, c, img.MsgID)[0])
	want := fmt.Sprintf("You sent 1 file:\n- image image.png: image/png, %d bytes, 64×48 pixels\n", size)
	if !strings.HasPrefix(got, want) {
		t.Fatalf("answer to the image:\n%s\nwant it to begin with\n%s", got, want)
	}

	mixed := c.postAs(wecomsim.MessageRequest{UserID: "bob", MsgType: "mixed", Items: []wecomsim.MixedPart{
		{MsgType: "text", Text: "which is bigger?"},
		{MsgType: "image", MediaPart: wecomsim.MediaPart{Width: 10, Height: 20, Filename: "small.png"}},
		{MsgType: "image", MediaPart: wecomsim.MediaPart{Width: 300, Height: 200, Filename: "big.png"}}}})
	got = c.replyTo("bob", mixed.MsgID)
	if !strings.HasPrefix(got, "You sent 2 files:\n- image small.png: image/png, ") || !strings.Contains(got, ", 10×20 pixels\n- image big.png: image/png, ") ||
		!strings.Contains(got, ", 300×200 pixels\n") || !strings.Contains(got, "You asked: which is bigger?") {
		t.Fatalf("answer to the mixed message:\n%s", got)
	}

	csv := "city,people\nA,1\n"
	quote := c.postAs(wecomsim.MessageRequest{UserID: "carol", Text: "sum the people", Quote: &wecomsim.QuotePart{MsgType: "file",
		MediaPart: wecomsim.MediaPart{ContentBase64: base64.StdEncoding.EncodeToString([]byte(csv)), Filename: "data.csv"}}})
	got = c.replyTo("carol", quote.MsgID)
	if !strings.HasPrefix(got, fmt.Sprintf("You sent 1 file:\n- file data.csv: text/csv, %d bytes (quoted)\n", len(csv))) {
		t.Fatalf("answer to the quote:\n%s", got)
	}

	r := c.record(n, mixed.MsgID)
	if len(r.Attachments) != 2 || r.Attachments[1].Name != "big.png" || r.Attachments[1].Width != 300 || r.Attachments[1].Key != r.ID+"/1" {
		t.Fatalf("mixed record attachments %+v", r.Attachments)
	}
	if c.downloads() != 4 {
		t.Fatalf("%d downloads, want 4 (one per file)", c.downloads())
	}
	testwait.Eventually(t, waitLong, "the worker's copies removed", func() bool {
		entries, _ := os.ReadDir(tmp)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "botctl-t_") {
				return false
			}
		}
		return true
	})

	// The same callback again (WeCom redelivering): no second download,
	// no second answer.
	c.postAs(wecomsim.MessageRequest{UserID: "alice", MsgID: img.MsgID})
	c.post("alice", "and now?")
	testwait.Eventually(t, waitLong, "the next question answered", func() bool { return answered(c.bot("alice"), "and now?") == 1 })
	if c.downloads() != 4 || countReplies(c.bot("alice"), img.MsgID) != 1 {
		t.Fatalf("after the replay: %d downloads, %d answers to the image", c.downloads(), countReplies(c.bot("alice"), img.MsgID))
	}
}

func countReplies(entries []wecomsim.TranscriptEntry, msgid string) int {
	k := 0
	for _, e := range entries {
		if e.ReplyTo == msgid {
			k++
		}
	}
	return k
}

// mustMedia is the bytes of msgid's media items, in order.
func mustMedia(t *testing.T, c *cluster, msgid string) [][]byte {
	t.Helper()
	list, err := c.sim.Media("b1")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, m := range list {
		if m.MsgID == msgid {
			b, _ := c.sim.MediaBytes(m.ID)
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no media for %s", msgid)
	}
	return out
}

// Bad media gets a reply naming why (and the limit), creates no task, and
// leaves the conversation free: the user's next question is answered.
func TestBadMediaRepliesWhyAndLocksNothing(t *testing.T) {
	t.Parallel() // mostly waiting on time windows (answers, quotas, TTLs): beside the other long tests
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) { cfg.Media.MaxBytes = 2048 })
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	// Each case in a conversation of its own: the eight cases' replies,
	// receipts and answers in one would pass its push.budget (20 a minute)
	// and wait for the minute to roll over, which is not what this tests.
	for i, tc := range []struct {
		name string
		req  wecomsim.MessageRequest
		want string
	}{
		{"too big", wecomsim.MessageRequest{MsgType: "file", MediaPart: wecomsim.MediaPart{Size: 5000}}, "超过了 2 KB 的上限"},
		{"too big in a mixed message", wecomsim.MessageRequest{MsgType: "mixed", Items: []wecomsim.MixedPart{
			{MsgType: "text", Text: "see"}, {MsgType: "image", MediaPart: wecomsim.MediaPart{Width: 800, Height: 800}}}}, "图片太大，超过了 2 KB"},
		{"bad aeskey", wecomsim.MessageRequest{MsgType: "image", MediaPart: wecomsim.MediaPart{Fault: "aeskey"}}, "图片无法解密"},
		{"short aeskey", wecomsim.MessageRequest{MsgType: "video", MediaPart: wecomsim.MediaPart{Fault: "short_key"}}, "视频无法解密"},
		{"truncated body", wecomsim.MessageRequest{MsgType: "file", MediaPart: wecomsim.MediaPart{Fault: "truncate"}}, "文件无法解密"},
		{"bad url", wecomsim.MessageRequest{MsgType: "file", MediaPart: wecomsim.MediaPart{Fault: "url"}}, "下载地址无效"},
		{"link gone", wecomsim.MessageRequest{MsgType: "image", MediaPart: wecomsim.MediaPart{Fault: "gone"}}, "下载链接已失效"},
		{"quoted image gone", wecomsim.MessageRequest{Text: "what is this?", Quote: &wecomsim.QuotePart{MsgType: "image",
			MediaPart: wecomsim.MediaPart{Fault: "gone"}}}, "下载链接已失效"},
	} {
		user := fmt.Sprintf("dave%d", i)
		tc.req.UserID = user
		sent := c.postAs(tc.req)
		if got := c.replyTo(user, sent.MsgID); !strings.Contains(got, tc.want) {
			t.Errorf("%s: reply %q, want it to contain %q", tc.name, got, tc.want)
		}
		// A message with files is recorded before its download; the
		// handling removes the record once it answered at receipt.
		testwait.Eventually(t, waitLong, tc.name+": no task record", func() bool { return c.record(n, sent.MsgID).ID == "" })
		// Nothing locked: the conversation's next question is answered.
		q := "after " + tc.name
		next := c.post(user, q)
		testwait.Eventually(t, waitLong, q+" answered", func() bool { return answered(c.bot(user), q) == 1 })
		if r := c.record(n, next.MsgID); r.Exec != task.Succeeded {
			t.Errorf("%s: next task %+v", tc.name, r)
		}
	}
	st, _ := c.sim.Stats("b1")
	if st.Connected != true || st.Connections != 1 {
		t.Fatalf("the connection did not hold: %+v", st)
	}
	if s := n.node.Access.Stats(); s.MediaFailed != 8 {
		t.Fatalf("media_failed %d, want 8", s.MediaFailed)
	}
}

// A download that hangs holds up nobody else: the user who sent it sees
// the receipt at once, another conversation is answered meanwhile, and
// the hung one is told it timed out (naming the limit).
func TestSlowDownloadHoldsUpNoOneElse(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.start("n1", func(cfg *config.Config) { cfg.Media.DownloadTimeout = 15 * time.Second })
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	slow := c.postAs(wecomsim.MessageRequest{UserID: "erin", MsgType: "file", MediaPart: wecomsim.MediaPart{Fault: "stall"}})
	testwait.Eventually(t, waitLong, "erin's receipt", func() bool { return countReplies(c.bot("erin"), slow.MsgID) == 1 })
	c.post("frank", "meanwhile?")
	testwait.Eventually(t, waitLong, "frank answered", func() bool { return answered(c.bot("frank"), "meanwhile?") == 1 })
	// The download cannot have ended yet: it ends at its 15 s timeout,
	// and frank's answer is what we waited for.
	for _, e := range c.bot("erin") {
		if e.ReplyTo == slow.MsgID && e.Finished {
			t.Fatalf("erin's stream finished before the download's timeout: %q", e.Content)
		}
	}
	if got := c.replyTo("erin", slow.MsgID); !strings.Contains(got, "文件下载超时（超过 15s）") {
		t.Fatalf("erin's reply %q", got)
	}
}

// A message with files in a busy conversation gets the busy reply, and
// its files do not stay in the media store.
func TestMediaOfABusyConversationLeavesNoFiles(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) { cfg.AI.Demo.AnswerTime = time.Minute })
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	long := c.post("gina", "a long one")
	testwait.Eventually(t, waitLong, "running", func() bool { return c.record(n, long.MsgID).Exec == task.Running })
	img := c.postAs(wecomsim.MessageRequest{UserID: "gina", MsgType: "image"})
	if got := c.replyTo("gina", img.MsgID); !strings.Contains(got, "上一个问题还在处理中") {
		t.Fatalf("reply to the image %q", got)
	}
	if c.downloads() != 1 {
		t.Fatalf("%d downloads, want 1", c.downloads())
	}
	testwait.Eventually(t, waitLong, "no file left for the busy message", func() bool {
		_, err := n.node.Store.Media().GetInfo(context.Background(), task.ID("b1", img.MsgID)+"/0")
		return errors.Is(err, natsjs.ErrObjectNotFound)
	})
}
