package serve

import (
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// botReplies is what bot b1 sent user: its entries in the transcript.
func botReplies(sim *wecomsim.Server, user string) []wecomsim.TranscriptEntry {
	var out []wecomsim.TranscriptEntry
	for _, m := range sim.Transcript("b1", user) {
		if m.From == "bot" {
			out = append(out, m)
		}
	}
	return out
}

// A demo answer to a question asking for an image ends with the image on
// its finishing frame (msg_item: base64 and md5 of a PNG, which the
// simulator checks), and the text is the answer's.
func TestReplyImageOnTheFinishingFrame(t *testing.T) {
	sim, addr := startSimServer(t)
	e, ns := startEtcd(t), startNATS(t)
	cfg := nodeConfig(t, "ws://"+addr+"/", e, ns.ClientURL())
	cfg.AI.Demo.AnswerTime = 200 * time.Millisecond
	if _, err := startNode(t, cfg); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "ann", Text: "draw an image please"}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "the answer finished with its image", func() bool {
		for _, m := range botReplies(sim, "ann") {
			if m.Kind == "stream" && m.Finished && m.Images == 1 && strings.Contains(m.Content, "You asked: draw an image please") {
				return true
			}
		}
		return false
	})
}
