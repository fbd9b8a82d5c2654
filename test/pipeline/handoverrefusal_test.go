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

// A leader stops gracefully while a file is still being downloaded; the
// download ends after its connection has closed, refused (too large). The
// refusal cannot go on the closed connection: the next leader tells the
// user, in the refusal's own words, once, and not that the question
// failed.
func TestRefusalAfterAGracefulHandoverIsToldInItsOwnWords(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	media := func(cfg *config.Config) {
		cfg.Media.MaxBytes = 1024
		cfg.Media.DownloadTimeout, cfg.Media.MessageTimeout = 3*time.Minute, 4*time.Minute
	}
	a := c.start("a", media)
	testwait.Eventually(t, waitLong, "a connected", c.connected)
	b := c.start("b", media)

	sent := c.postAs(wecomsim.MessageRequest{UserID: "alice", MsgType: "file", MediaPart: wecomsim.MediaPart{Fault: "hold", Size: 4096}})
	testwait.Eventually(t, waitLong, "receipted", func() bool { return countReplies(c.bot("alice"), sent.MsgID) == 1 })
	testwait.Eventually(t, waitLong, "downloading", func() bool { return c.downloads() >= 1 })

	stopped := make(chan struct{})
	go func() { defer close(stopped); a.stop() }()
	// a holds the bot until the download's handling ends: its connection
	// closes first, and only then does the download end.
	testwait.Eventually(t, waitLong, "a's connection closed", func() bool { return !c.connected() })
	if k := c.sim.ReleaseMedia(sent.MsgID); k != 1 {
		t.Fatalf("released %d items, want 1", k)
	}
	testwait.Eventually(t, waitLong, "the record refused in its words", func() bool {
		r := c.record(b, sent.MsgID)
		return r.Exec == task.Failed && strings.Contains(r.Refusal, "太大")
	})
	testwait.Eventually(t, waitLong, "alice told", func() bool {
		for _, e := range c.bot("alice") {
			if e.Finished && strings.Contains(e.Content, "太大") {
				return true
			}
		}
		return false
	})
	testwait.Eventually(t, waitLong, "recorded delivered", func() bool { return c.record(b, sent.MsgID).Delivery == task.Delivered })
	<-stopped
	told := 0
	for _, e := range c.bot("alice") {
		if strings.Contains(e.Content, "处理失败") {
			t.Fatalf("alice told the question failed: %q", e.Content)
		}
		if e.Finished && strings.Contains(e.Content, "太大") {
			told++
		}
	}
	if told != 1 {
		t.Fatalf("alice told the refusal %d times, want once: %+v", told, c.bot("alice"))
	}
}
