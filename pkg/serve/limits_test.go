package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/botctl/botctl/pkg/buildinfo"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/limits"
	"github.com/botctl/botctl/pkg/metrics"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
	natsjs "github.com/nats-io/nats.go/jetstream"
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
	if _, err := rn.Lifecycle.Get(ctx, task.ID("b1", msgid)); !errors.Is(err, natsjs.ErrKeyNotFound) {
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
	t.Parallel()
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
	t.Parallel()
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

// usageOpenAI is an OpenAI-compatible server that answers "ok" and
// reports 60 prompt and 40 completion tokens in the stream's last chunk,
// as OpenAI does when asked (stream_options.include_usage).
func usageOpenAI(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}`+"\n\n")
		if req.StreamOptions.IncludeUsage {
			fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[],"usage":{"prompt_tokens":60,"completion_tokens":40,"total_tokens":100}}`+"\n\n")
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// limits.user.tokens_per_day with a backend that reports usage: the
// tokens of each answer are recorded in its task and counted, and once
// the day's reach the limit the user's next message is refused. The model
// metrics are in /metrics by bot and backend, without user labels, and in
// GET /status.
func TestUserOverTokensPerDayAndModelMetrics(t *testing.T) {
	sim, wecomURL := startSimBots(t, "b1")
	e, ns := startEtcd(t), startNATS(t)
	t.Setenv("LIMITS_TEST_KEY", "sk-test")
	cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
	cfg.AI = config.AI{Kind: config.AIKindOpenAI, MaxAnswerBytes: config.DefaultMaxAnswerBytes,
		OpenAI: config.AIOpenAI{BaseURL: usageOpenAI(t), Model: "m", APIKeyEnv: "LIMITS_TEST_KEY"}}
	cfg.Bots = []config.Bot{{ID: "b1", Secret: "s-b1", Settings: settings(t, "limits: {user: {tokens_per_day: 150}}")}}
	rn, err := startNode(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "b1 connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })

	msgid, answer := ask(t, sim, "ann", "g1", "first")
	if answer != "ok" {
		t.Fatalf("first answer %q", answer)
	}
	rec, err := rn.Lifecycle.Get(context.Background(), task.ID("b1", msgid))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Usage == nil || *rec.Usage != (task.Usage{In: 60, Out: 40}) {
		t.Errorf("the task's recorded usage %+v, want in 60, out 40", rec.Usage)
	}
	if _, answer := ask(t, sim, "ann", "g2", "second"); answer != "ok" { // 100 of 150: admitted
		t.Fatalf("second answer %q", answer)
	}
	msgid, answer = ask(t, sim, "ann", "g3", "third") // 200 of 150
	if answer != access.DefaultLimit {
		t.Fatalf("third message answered %q, want the default limit text", answer)
	}
	noTask(t, rn, msgid)
	if _, answer := ask(t, sim, "bob", "g4", "mine"); answer != "ok" {
		t.Fatalf("another user's answer %q", answer)
	}

	m := rn.scrape(t)
	for _, want := range []string{
		`botctl_limit_refusals_total{bot="b1",limit="user.tokens_per_day"} 1`,
		`botctl_ai_tokens_total{backend="openai:m",bot="b1",direction="in"} 180`,
		`botctl_ai_tokens_total{backend="openai:m",bot="b1",direction="out"} 120`,
		`botctl_ai_first_token_seconds_count{backend="openai:m",bot="b1"} 3`,
		`botctl_ai_answer_seconds_count{backend="openai:m",bot="b1"} 3`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(m, "botctl_ai_"))
		}
	}
	if strings.Contains(grepLines(m, "botctl_ai_")+grepLines(m, "botctl_limit_"), "user=") {
		t.Error("a model or limit metric has a user label")
	}
	var st struct {
		Build buildinfo.Info                  `json:"build"`
		Model map[string]metrics.ModelSummary `json:"model"`
	}
	getJSON(t, rn, "/status", &st)
	if in := buildinfo.Get(); st.Build != in {
		t.Errorf("GET /status build %+v, want %+v", st.Build, in)
	}
	if s := st.Model["b1"]; s.Calls != 3 || s.Errors != 0 || s.TokensIn != 180 || s.TokensOut != 120 || s.TTFTp99 < s.TTFTp50 {
		t.Errorf("GET /status model of b1: %+v", s)
	}
}

// getJSON GETs path from the node's API with its token into v.
func getJSON(t *testing.T, rn *runningNode, path string, v any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, rn.API+path, nil)
	req.Header.Set("Authorization", "Bearer "+rn.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// The counts are in JetStream, not in the leader's memory: a user's day
// counted by one leader holds after a failover to another node.
func TestUserLimitHoldsAcrossLeaderChange(t *testing.T) {
	t.Parallel()
	sim, wecomURL := startSimBots(t, "b1")
	e, ns := startEtcd(t), startNATS(t)
	conf := func(id string) config.Config {
		cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
		cfg.NodeID = id
		cfg.AI.Demo.AnswerTime = 50 * time.Millisecond
		cfg.Bots = []config.Bot{{ID: "b1", Secret: "s-b1", Settings: settings(t, "limits: {user: {messages_per_day: 2}}")}}
		return cfg
	}
	n1, err := startNode(t, conf("n1"))
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "n1 leads b1", func() bool { return n1.Node.Node.Info().Bots["b1"].State == node.StateLeader })
	testwait.Eventually(t, time.Minute, "b1 connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	ask(t, sim, "ann", "g1", "one")
	ask(t, sim, "ann", "g2", "two")
	n2, err := startNode(t, conf("n2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := n1.Stop(); err != nil {
		t.Fatalf("n1 stopped with %v", err)
	}
	testwait.Eventually(t, 2*time.Minute, "n2 leads b1, connected", func() bool {
		st, _ := sim.Stats("b1")
		return n2.Node.Node.Info().Bots["b1"].State == node.StateLeader && st.Connected
	})
	msgid, answer := ask(t, sim, "ann", "g3", "three")
	if answer != access.DefaultLimit {
		t.Fatalf("the user's third message of the day, after the failover, answered %q: want the limit text", answer)
	}
	noTask(t, n2, msgid)
}

// A message answered "busy" runs no task and is not counted: the user's
// next question in a minute limited to two is still answered. A message
// over the limit in a conversation whose task is running gets the limit
// text, not the busy reply (the limits are checked before the dispatch).
func TestBusyIsNotCountedAndLimitBeforeBusy(t *testing.T) {
	t.Parallel()
	sim, wecomURL := startSimBots(t, "b1")
	e, ns := startEtcd(t), startNATS(t)
	cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
	cfg.AI.Demo.AnswerTime = 3 * time.Second
	cfg.Bots = []config.Bot{{ID: "b1", Secret: "s-b1", Settings: settings(t, "limits: {user: {messages_per_minute: 2}}")}}
	rn, err := startNode(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "b1 connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	earlyInMinute()
	post := func(chat, text string) wecomsim.MessageResult {
		t.Helper()
		res, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "ann", ChatType: "group", ChatID: chat, Text: text})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	running := func(msgid string) {
		t.Helper()
		testwait.Eventually(t, time.Minute, msgid+" running", func() bool {
			r, err := rn.Lifecycle.Get(context.Background(), task.ID("b1", msgid))
			return err == nil && r.Exec == task.Running
		})
	}
	finished := func(chat, msgid string) string {
		t.Helper()
		var out string
		testwait.Eventually(t, time.Minute, "the final frame to "+msgid, func() bool {
			for _, e := range sim.Transcript("b1", chat) {
				if e.From == "bot" && e.Finished && e.ReplyTo == msgid {
					out = e.Content
					return true
				}
			}
			return false
		})
		return out
	}
	first := post("g1", "first") // counted: 1
	running(first.MsgID)
	busy := post("g1", "while the first runs") // busy: given back
	if got := finished("g1", busy.MsgID); got != access.DefaultBusy {
		t.Fatalf("a message while the conversation's task runs answered %q, want the busy reply", got)
	}
	finished("g1", first.MsgID)
	second := post("g2", "second") // counted: 2
	running(second.MsgID)
	third := post("g2", "third") // over, while the second runs: the limit, not busy
	if got := finished("g2", third.MsgID); got != access.DefaultLimit {
		t.Fatalf("the third message of the minute, while the conversation's task runs, answered %q: want the limit text", got)
	}
	if got := finished("g2", second.MsgID); got == access.DefaultLimit {
		t.Fatal("the second counted message of the minute refused: the busy one was counted")
	}
	noTask(t, rn, third.MsgID)
}
