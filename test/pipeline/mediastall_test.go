package pipeline

import (
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/faultproxy"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// stalledImages is a mixed message of n images whose downloads hang.
func stalledImages(user string, n int) wecomsim.MessageRequest {
	items := []wecomsim.MixedPart{{MsgType: "text", Text: "look"}}
	for range n {
		items = append(items, wecomsim.MixedPart{MsgType: "image", MediaPart: wecomsim.MediaPart{Fault: "stall"}})
	}
	return wecomsim.MessageRequest{UserID: user, MsgType: "mixed", Items: items}
}

// Two media messages whose downloads hang (four images each, more than
// a conversation's share of the node's four download slots) delay neither
// a third media message nor a text message: both are answered while the
// two still hang, and the hung ones hold one slot each.
func TestStalledMediaDelaysNoOneElse(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.start("n1", func(cfg *config.Config) {
		cfg.Media.Parallel = 4
		cfg.Media.DownloadTimeout, cfg.Media.MessageTimeout = 3*time.Minute, 4*time.Minute
	})
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	alice := c.postAs(stalledImages("alice", 4))
	bob := c.postAs(stalledImages("bob", 4))
	testwait.Eventually(t, waitLong, "both receipted", func() bool {
		return countReplies(c.bot("alice"), alice.MsgID) == 1 && countReplies(c.bot("bob"), bob.MsgID) == 1
	})
	testwait.Eventually(t, waitLong, "both downloading", func() bool { return c.downloads() >= 2 })

	carol := c.postAs(wecomsim.MessageRequest{UserID: "carol", MsgType: "image"})
	if got := c.replyTo("carol", carol.MsgID); !strings.HasPrefix(got, "You sent 1 file:") {
		t.Fatalf("carol's image answered %q", got)
	}
	c.post("dave", "meanwhile?")
	testwait.Eventually(t, waitLong, "dave answered", func() bool { return answered(c.bot("dave"), "meanwhile?") == 1 })

	for user, m := range map[string]wecomsim.MessageResult{"alice": alice, "bob": bob} {
		for _, e := range c.bot(user) {
			if e.ReplyTo == m.MsgID && e.Finished {
				t.Fatalf("%s's hung message ended before its deadline: %q", user, e.Content)
			}
		}
	}
	if n := c.downloads(); n != 3 {
		t.Fatalf("%d downloads started, want 3: one hanging for each of alice and bob (a conversation's share of 4 slots), carol's", n)
	}
}

// The leader stops mid-download, cut off from NATS first so that nothing
// of its handling reaches JetStream or WeCom after (a node in this
// process cannot be killed; this is what a kill leaves behind). The
// message was recorded before its download: the next leader's sweep gives
// it up past its deadline, and its pusher tells the user it failed.
func TestLeaderStoppedMidDownloadTellsTheUser(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.sweep = time.Second
	toNATS, err := faultproxy.New("127.0.0.1:0", strings.TrimPrefix(c.nats.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { toNATS.Close() })
	media := func(cfg *config.Config) {
		cfg.Media.DownloadTimeout, cfg.Media.MessageTimeout = 20*time.Second, 20*time.Second
	}
	a := c.startOn("a", "nats://"+toNATS.Addr(), media)
	testwait.Eventually(t, waitLong, "a connected", c.connected)
	b := c.start("b", media)

	sent := c.postAs(wecomsim.MessageRequest{UserID: "alice", MsgType: "image", MediaPart: wecomsim.MediaPart{Fault: "stall"}})
	testwait.Eventually(t, waitLong, "receipted", func() bool { return countReplies(c.bot("alice"), sent.MsgID) == 1 })
	testwait.Eventually(t, waitLong, "recorded before the download", func() bool { return c.record(b, sent.MsgID).Receiving() })

	toNATS.Close() // NATS is out of a's reach, and only a's
	a.stop()

	var told wecomsim.TranscriptEntry
	testwait.Eventually(t, 2*waitLong, "alice told", func() bool {
		for _, e := range c.bot("alice") {
			if e.ReplyTo == "" && e.Finished && strings.Contains(e.Content, "处理失败") {
				told = e
				return true
			}
		}
		return false
	})
	testwait.Eventually(t, waitLong, "recorded delivered", func() bool { return c.record(b, sent.MsgID).Delivery == task.Delivered })
	if r := c.record(b, sent.MsgID); r.Exec != task.Failed || !strings.Contains(r.Error, "files not received") {
		t.Fatalf("record %s %q, want failed as files not received", r.Exec, r.Error)
	}
	time.Sleep(2 * time.Second) // a second notice would come now
	k := 0
	for _, e := range c.bot("alice") {
		if e.ReplyTo == "" && strings.Contains(e.Content, "处理失败") {
			k++
		}
	}
	if k != 1 {
		t.Fatalf("alice told %d times, want once (first: %q)", k, told.Content)
	}
}

// /status and /stop find a task that is out of the queue: one whose
// files are still being received says so, rather than "no task".
func TestStatusAndStopSeeAMessageStillReceivingItsFiles(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) {
		cfg.Media.DownloadTimeout, cfg.Media.MessageTimeout = 3*time.Minute, 4*time.Minute
	})
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	m := c.postAs(stalledImages("alice", 1))
	testwait.Eventually(t, waitLong, "downloading", func() bool { return c.downloads() >= 1 })
	status := c.postAs(wecomsim.MessageRequest{UserID: "alice", Text: "/status"})
	if got := c.replyTo("alice", status.MsgID); !strings.Contains(got, "正在接收文件") || !strings.Contains(got, "look") {
		t.Fatalf("/status while the files are received: %q", got)
	}
	stop := c.postAs(wecomsim.MessageRequest{UserID: "alice", Text: "/stop"})
	if got := c.replyTo("alice", stop.MsgID); !strings.Contains(got, "还在接收中") {
		t.Fatalf("/stop while the files are received: %q", got)
	}
	if r := c.record(n, m.MsgID); !r.Receiving() {
		t.Fatalf("the message's record: %+v, want still receiving", r)
	}
}
