package serve

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/botsettings"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// access.welcome_text end to end, seen from WeCom: a user opening the
// chat (enter_chat) reads nothing when no welcome is set; with one set,
// the welcome (aibot_respond_welcome_msg on the event's req_id, inside
// WeCom's 5 s) says the bot's own text, or the top level's for a bot
// without one, and a run-time override (botctl bots set) changes it for
// the next user. No welcome takes a task, and the connection holds.
func TestWelcomeTextEndToEnd(t *testing.T) {
	t.Parallel()
	sim, wecomURL := startSimBots(t, "b1", "b2")
	e, ns := startEtcd(t), startNATS(t)
	enter := func(bot, user string) wecomsim.EventResult {
		t.Helper()
		res, err := sim.PostEvent(wecomsim.EventRequest{BotID: bot, UserID: user, EventType: wecom.EventEnterChat})
		if err != nil || !res.Delivered {
			t.Fatalf("enter_chat %s/%s: %+v %v", bot, user, res, err)
		}
		return res
	}
	// welcomes are the welcome messages bot sent user, each with the
	// event it answers.
	welcomes := func(bot, user string) []wecomsim.TranscriptEntry {
		var out []wecomsim.TranscriptEntry
		for _, m := range sim.Transcript(bot, user) {
			if m.From == "bot" && m.Kind == "welcome" {
				out = append(out, m)
			}
		}
		return out
	}
	connected := func(bot string) {
		t.Helper()
		testwait.Eventually(t, time.Minute, bot+" connected", func() bool { st, _ := sim.Stats(bot); return st.Connected })
	}

	// No welcome anywhere: nothing. The question after the event is
	// answered first (the event was handled by then: one connection's
	// callbacks are handed over in order, and a welcome goes out at once).
	cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
	cfg.Bots = []config.Bot{{ID: "b1", Secret: "s-b1"}}
	first, err := startNode(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	connected("b1")
	enter("b1", "ann")
	if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "ann", Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "ann's question answered", func() bool {
		return strings.HasPrefix(lastFinished(sim, "b1", "ann"), "You asked: hello")
	})
	if w := welcomes("b1", "ann"); len(w) != 0 {
		t.Fatalf("a welcome without access.welcome_text: %+v", w)
	}
	if st, _ := sim.Stats("b1"); st.Frames[wecom.CmdRespondWelcomeMsg] != 0 {
		t.Fatalf("%d welcome frames sent without access.welcome_text", st.Frames[wecom.CmdRespondWelcomeMsg])
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}

	// The top level's welcome, and b1's own.
	cfg = nodeConfig(t, wecomURL, e, ns.ClientURL())
	cfg.NodeID = "n2"
	cfg.Access.WelcomeText = "你好，我是公司的助手。"
	cfg.Bots = []config.Bot{
		{ID: "b1", Secret: "s-b1", Settings: settings(t, "access: {welcome_text: 你好，我是售后客服助手，请描述你遇到的问题。}")},
		{ID: "b2", Secret: "s-b2"},
	}
	second, err := startNode(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	connected("b1")
	connected("b2")
	for _, tc := range []struct{ bot, user, want string }{
		{"b1", "bob", "你好，我是售后客服助手，请描述你遇到的问题。"},
		{"b2", "bob", "你好，我是公司的助手。"},
	} {
		ev := enter(tc.bot, tc.user)
		testwait.Eventually(t, time.Minute, tc.bot+"'s welcome", func() bool { return len(welcomes(tc.bot, tc.user)) > 0 })
		w := welcomes(tc.bot, tc.user)
		if len(w) != 1 || w[0].Content != tc.want || w[0].ReplyTo != ev.MsgID {
			t.Errorf("%s welcomed %s with %+v, want one %q answering %s", tc.bot, tc.user, w, tc.want, ev.MsgID)
		}
	}

	// botctl bots set changes b2's welcome for the next user.
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	base, err := cfg.BotSettings("b2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := botsettings.Put(context.Background(), cli, botsettings.DefaultPrefix, "b2",
		settings(t, "access: {welcome_text: 欢迎回来。}"), base, 0); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "the override applied", func() bool { return second.bots.Rules("b2").Texts.Welcome == "欢迎回来。" })
	enter("b2", "cat")
	testwait.Eventually(t, time.Minute, "cat's welcome", func() bool { return len(welcomes("b2", "cat")) > 0 })
	if w := welcomes("b2", "cat"); len(w) != 1 || w[0].Content != "欢迎回来。" {
		t.Fatalf("after bots set b2 welcomed cat with %+v", w)
	}

	for _, b := range []string{"b1", "b2"} {
		st, _ := sim.Stats(b)
		if st.InvalidReqIDs != 0 || st.Kicks != 0 || !st.Connected {
			t.Errorf("%s: %+v", b, st)
		}
	}
	if s := second.Dispatch.Stats(); s.Queued != 0 {
		t.Fatalf("welcomes dispatched %d tasks", s.Queued)
	}
}
