package serve

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/limits"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/nats-io/nats.go/jetstream"
)

// earlyInMinute waits until the clock is early in a minute, so that a
// test's few messages are counted in one calendar minute on a loaded
// machine (they take seconds, not twenty).
func earlyInMinute() {
	for time.Now().Second() > 35 {
		time.Sleep(time.Second)
	}
}

// limitsNode starts node n1 with bot b1 (the demo backend, quick
// answers) and the limits doc (YAML of the bot's limits section).
func limitsNode(t *testing.T, doc string) (*wecomsim.Server, *runningNode) {
	t.Helper()
	sim, wecomURL := startSimBots(t, "b1")
	e, ns := startEtcd(t), startNATS(t)
	cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
	cfg.AI.Demo.AnswerTime = 50 * time.Millisecond
	cfg.Bots = []config.Bot{{ID: "b1", Secret: "s-b1", Settings: settings(t, "limits: "+doc+"\naccess: {limit_text: 今天的额度用完了}")}}
	rn, err := startNode(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "b1 connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	return sim, rn
}

// ask posts text from user in group chat and waits for its final frame.
func ask(t *testing.T, sim *wecomsim.Server, user, chat, text string) (msgid, answer string) {
	t.Helper()
	res, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: user, ChatType: "group", ChatID: chat, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "an answer to "+text, func() bool {
		for _, e := range sim.Transcript("b1", chat) {
			if e.From == "bot" && e.Finished && e.ReplyTo == res.MsgID {
				answer = e.Content
				return true
			}
		}
		return false
	})
	return res.MsgID, answer
}

// noTask checks that msgid ran no task: no record, nothing in the queue.
func noTask(t *testing.T, rn *runningNode, msgid string) {
	t.Helper()
	ctx := context.Background()
	if _, err := rn.Lifecycle.Get(ctx, task.ID("b1", msgid)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("task record of the refused message: %v, want none", err)
	}
	info, err := rn.Store.TaskStream().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("%d tasks in the queue after the refusal, want 0", info.State.Msgs)
	}
}

// A user over limits.user.messages_per_minute gets the bot's limit text,
// no task is published, and the refusal is counted in /metrics; another
// user of the bot is not limited by it.
func TestUserOverMessagesPerMinuteIsRefused(t *testing.T) {
	sim, rn := limitsNode(t, "{user: {messages_per_minute: 2}}")
	earlyInMinute()
	for i, chat := range []string{"g1", "g2"} {
		if _, answer := ask(t, sim, "ann", chat, "question"); answer == "今天的额度用完了" {
			t.Fatalf("message %d of 2 refused", i+1)
		}
	}
	msgid, answer := ask(t, sim, "ann", "g3", "one more")
	if answer != "今天的额度用完了" {
		t.Fatalf("third message in a minute answered %q, want the limit text", answer)
	}
	noTask(t, rn, msgid)
	if _, answer := ask(t, sim, "bob", "g4", "question"); answer == "今天的额度用完了" {
		t.Fatal("another user refused by ann's limit")
	}
	if got := rn.Access.Stats().Limited; got != 1 {
		t.Errorf("access stats: limited %d, want 1", got)
	}
	if m := rn.scrape(t); !strings.Contains(m, `botctl_limit_refusals_total{bot="b1",limit="user.messages_per_minute"} 1`) {
		t.Errorf("/metrics lacks the refusal:\n%s", grepLines(m, "limit_refusals"))
	}
}

// The bot-wide limit counts every user's messages.
func TestBotOverMessagesPerDayIsRefused(t *testing.T) {
	sim, rn := limitsNode(t, "{bot: {messages_per_day: 2}}")
	ask(t, sim, "ann", "g1", "question")
	ask(t, sim, "bob", "g2", "question")
	msgid, answer := ask(t, sim, "cy", "g3", "question")
	if answer != "今天的额度用完了" {
		t.Fatalf("the bot's third message of the day answered %q, want the limit text", answer)
	}
	noTask(t, rn, msgid)
	use, err := limits.New(rn.Store.Limits(), nil).Read(context.Background(), limits.BotKey("b1"))
	if err != nil {
		t.Fatal(err)
	}
	if use.Messages != 2 || use.Day != time.Now().UTC().Format(time.DateOnly) {
		t.Errorf("the bot's count: %+v, want 2 messages today (UTC)", use)
	}
	if m := rn.scrape(t); !strings.Contains(m, `botctl_limit_refusals_total{bot="b1",limit="bot.messages_per_day"} 1`) {
		t.Errorf("/metrics lacks the refusal:\n%s", grepLines(m, "limit_refusals"))
	}
}

// grepLines are the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
