package serve

import (
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// A connection deaf for a few seconds, too few for a silence alarm (a
// fresh node's baseline has no opinion yet, as a sparse bot's has none
// below minutes): no incident opens, and before the history audit the
// messages WeCom kept meanwhile were answered by nobody (chaos
// sim-silence, with answers of 5–60 s). The audit finds them in the
// history and answers them, late.
func TestHistoryAuditAnswersWhatADeafConnectionMissed(t *testing.T) {
	t.Parallel() // mostly waiting on time windows (quotas, elections, audits): beside the other long tests
	sim, addr := startSimServer(t)
	e, ns := startEtcd(t), startNATS(t)
	cfg := nodeConfig(t, "ws://"+addr+"/", e, ns.ClientURL())
	cfg.Backfill.HistoryURL = "http://" + addr
	cfg.Backfill.AuditEvery = 2 * time.Second
	cfg.AI.Demo.AnswerTime = 200 * time.Millisecond
	if _, err := startNode(t, cfg); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	time.Sleep(backfill.PassDelay + 3*time.Second) // the term's first pass has read its window

	if err := sim.Fault(wecomsim.FaultRequest{BotID: "b1", Action: "silence", Seconds: 3}); err != nil {
		t.Fatal(err)
	}
	missed, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "ann", Text: "asked while deaf"})
	if err != nil || missed.Delivered {
		t.Fatalf("message during the silence: %+v, %v (want undelivered)", missed, err)
	}
	answered := func(user, question string) int {
		n := 0
		for _, m := range sim.Transcript("b1", user) {
			if m.From == "bot" && m.Finished && strings.Contains(m.Content, "You asked: "+question) {
				n++
			}
		}
		return n
	}
	time.Sleep(4 * time.Second) // the silence ends; nothing else happens on the connection
	later, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "bob", Text: "asked after"})
	if err != nil || !later.Delivered {
		t.Fatalf("message after the silence: %+v, %v", later, err)
	}
	testwait.Eventually(t, time.Minute, "the live message answered", func() bool { return answered("bob", "asked after") == 1 })
	testwait.Eventually(t, time.Minute, "the missed message answered by the audit", func() bool { return answered("ann", "asked while deaf") == 1 })
	// Once: later audits read it as handled.
	time.Sleep(5 * time.Second)
	if n := answered("ann", "asked while deaf"); n != 1 {
		t.Fatalf("the missed message answered %d times", n)
	}
}
