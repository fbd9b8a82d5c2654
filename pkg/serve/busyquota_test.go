package serve

import (
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
)

// A busy reply WeCom refuses as over its quota (45009: botctl's budget
// thought there was room) was not shown: it is still owed, and the pusher
// sends it once the quota allows, as it does a busy reply the budget held
// back.
func TestBusyReplyRefusedByTheQuotaIsSentLater(t *testing.T) {
	t.Parallel()
	// WeCom's window far tighter than the default budget (20 a minute):
	// the first question's receipt and first frame use it up.
	sim, wecomURL := startSimBotsWith(t, wecomsim.Config{Logger: zerolog.Nop(), RateLimit: 2, RateWindow: 10 * time.Second}, "b1")
	e, ns := startEtcd(t), startNATS(t)
	cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
	cfg.AI.Demo.AnswerTime = 8 * time.Second
	cfg.Bots = []config.Bot{{ID: "b1", Secret: "s-b1"}}
	if _, err := startNode(t, cfg); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "b1 connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	post := func(text string) string {
		t.Helper()
		res, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "ann", Text: text})
		if err != nil {
			t.Fatal(err)
		}
		return res.MsgID
	}
	first := post("first")
	testwait.Eventually(t, time.Minute, "the first question's window used up", func() bool {
		st, _ := sim.Stats("b1")
		return st.QuotaRejections > 0 || len(sim.Transcript("b1", "ann")) >= 3 // the question and two frames
	})
	busy := post("while the first runs")
	testwait.Eventually(t, 3*time.Minute, "the busy reply shown", func() bool { return finishedReply(sim, busy) == access.DefaultBusy })
	testwait.Eventually(t, 3*time.Minute, "the first answer finished", func() bool { return finishedReply(sim, first) != "" })
}

// finishedReply is the final frame replying to msgid in ann's chat ("":
// none yet).
func finishedReply(sim *wecomsim.Server, msgid string) string {
	for _, e := range sim.Transcript("b1", "ann") {
		if e.From == "bot" && e.Finished && e.ReplyTo == msgid {
			return e.Content
		}
	}
	return ""
}
