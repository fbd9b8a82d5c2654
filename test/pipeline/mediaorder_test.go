package pipeline

import (
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// A user sends an image whose download hangs, then a text in the same
// chat: the text is not dispatched while the image is downloaded, and
// once the download ends the image's task is dispatched first (it is
// answered, not refused busy; the text then finds the conversation busy,
// or runs after it). A text in another chat meanwhile is answered at once.
func TestTextDoesNotOvertakeFilesOfItsConversation(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) {
		cfg.Media.DownloadTimeout, cfg.Media.MessageTimeout = 3*time.Minute, 4*time.Minute
	})
	testwait.Eventually(t, waitLong, "leader connected", c.connected)

	img := c.postAs(wecomsim.MessageRequest{UserID: "alice", MsgType: "image", MediaPart: wecomsim.MediaPart{Fault: "hold"}})
	testwait.Eventually(t, waitLong, "downloading", func() bool { return c.downloads() >= 1 })
	text := c.post("alice", "what is in it?")
	c.post("bob", "meanwhile?")
	testwait.Eventually(t, waitLong, "bob answered", func() bool { return answered(c.bot("bob"), "meanwhile?") == 1 })
	// Posted before bob's, alice's text would have been dispatched by now.
	if r := c.record(n, text.MsgID); r.Tier != "" || r.Exec != "" {
		t.Fatalf("alice's text dispatched while her image was downloaded: %s on tier %q", r.Exec, r.Tier)
	}
	for _, e := range c.bot("alice") {
		if e.ReplyTo == text.MsgID && e.Finished {
			t.Fatalf("alice's text answered while her image was downloaded: %q", e.Content)
		}
	}

	if k := c.sim.ReleaseMedia(img.MsgID); k != 1 {
		t.Fatalf("released %d items, want 1", k)
	}
	if got := c.replyTo("alice", img.MsgID); !strings.HasPrefix(got, "You sent 1 file:") {
		t.Fatalf("alice's image answered %q, want its task's answer", got)
	}
	got := c.replyTo("alice", text.MsgID)
	if strings.Contains(got, "还在处理中") {
		return // the image's task held the conversation: the text was after it
	}
	if !strings.HasPrefix(got, "You asked: what is in it?") {
		t.Fatalf("alice's text answered %q", got)
	}
	imgRec, textRec := c.record(n, img.MsgID), c.record(n, text.MsgID)
	if imgRec.Started.IsZero() || !textRec.Started.After(imgRec.Started) {
		t.Fatalf("alice's text started %s, her image %s: want the image first", textRec.Started, imgRec.Started)
	}
}
