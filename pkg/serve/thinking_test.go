package serve

import (
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// A bot's ai.show_thinking reaches its pusher: the demo's thinking is
// folded before the answer where the bot shows it, and nowhere else.
func TestShowThinkingIsEachBots(t *testing.T) {
	t.Parallel()
	sim, wecomURL := startSimBots(t, "b1", "b2")
	e, ns := startEtcd(t), startNATS(t)
	cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
	cfg.AI = config.AI{Kind: config.AIKindDemo, MaxAnswerBytes: config.DefaultMaxAnswerBytes,
		Demo: config.AIDemo{Paragraphs: 2, AnswerTime: 300 * time.Millisecond}}
	cfg.Bots = []config.Bot{
		{ID: "b1", Secret: "s-b1", Settings: settings(t, "ai: {show_thinking: true}")},
		{ID: "b2", Secret: "s-b2"},
	}
	if _, err := startNode(t, cfg); err != nil {
		t.Fatal(err)
	}
	const q = "how do tides work"
	for _, b := range []string{"b1", "b2"} {
		testwait.Eventually(t, time.Minute, b+" connected", func() bool { st, _ := sim.Stats(b); return st.Connected })
		if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: b, UserID: "ann", Text: q}); err != nil {
			t.Fatal(err)
		}
	}
	answer := ai.DemoAnswer(q, 2, 0)
	want := map[string]string{
		"b1": "<think>" + ai.DemoThinking(q) + "\n🔧 demo_search: started\n🔧 demo_search: done</think>\n\n" + answer,
		"b2": answer,
	}
	for b, w := range want {
		testwait.Eventually(t, time.Minute, b+" answered", func() bool { return lastFinished(sim, b, "ann") != "" })
		if got := lastFinished(sim, b, "ann"); got != w {
			t.Errorf("%s answered %q, want %q", b, got, w)
		}
	}
}
