package serve

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/sendapi"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
)

// startSimWith starts a WeCom simulator configured by cfg with bot b1
// (secret s1) and returns it with its HOST:PORT.
func startSimWith(t *testing.T, cfg wecomsim.Config) (*wecomsim.Server, string) {
	t.Helper()
	cfg.Logger = zerolog.Nop()
	sim := wecomsim.New(cfg)
	if err := sim.AddBot("b1", "s1"); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go sim.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sim.Shutdown(ctx)
	})
	return sim, ln.Addr().String()
}

// sendCluster is two nodes of bot b1 sharing a token file: n1 leads, n2
// is a standby.
type sendCluster struct {
	sim    *wecomsim.Server
	n1, n2 *runningNode
}

// startSendCluster starts the simulator (simCfg), n1, waits for it to
// hold b1's connection, then starts n2. tweak adjusts both nodes' config.
func startSendCluster(t *testing.T, simCfg wecomsim.Config, tweak func(*config.Config)) *sendCluster {
	t.Helper()
	e, ns := startEtcd(t), startNATS(t)
	sim, addr := startSimWith(t, simCfg)
	tokenFile := keyFile(t, testToken)
	cfgOf := func(id string) config.Config {
		cfg := nodeConfig(t, "ws://"+addr+"/", e, ns.ClientURL())
		cfg.NodeID = id
		cfg.API.TokenFile = tokenFile
		if tweak != nil {
			tweak(&cfg)
		}
		return cfg
	}
	c := &sendCluster{sim: sim}
	var err error
	if c.n1, err = startNode(t, cfgOf("n1")); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "n1 connected", func() bool { return c.n1.obs.conn("b1") != nil })
	if c.n2, err = startNode(t, cfgOf("n2")); err != nil {
		t.Fatal(err)
	}
	return c
}

// talk has user talk to b1 and waits for the answer: from then on the bot
// may message the user.
func (c *sendCluster) talk(t *testing.T, user string) {
	t.Helper()
	if _, err := c.sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: user, Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, user+" answered", func() bool { return answeredWith(c.sim, user, "hello") })
}

// sendCall is one call of the send API and its answer.
type sendCall struct {
	code   int
	header http.Header
	res    sendapi.Result
	raw    string
}

// postSend POSTs body to base's send API as bot with token ("": none)
// and extra headers.
func postSend(t *testing.T, base, token, bot, body string, hdr ...string) sendCall {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+sendapi.URL(bot), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	c := sendCall{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if err := json.Unmarshal(raw, &c.res); err != nil {
		t.Fatalf("answer %d is not JSON: %q", c.code, raw)
	}
	return c
}

func markdownTo(chat, content string) string {
	b, _ := json.Marshal(sendapi.Request{Chat: chat, MsgType: "markdown", Markdown: &sendapi.Markdown{Content: content}})
	return string(b)
}

// pushed reports whether user's chat shows a proactive message of kind
// holding text.
func pushed(sim *wecomsim.Server, user, kind, text string) bool {
	for _, m := range sim.Transcript("b1", user) {
		if m.From == "bot" && m.ReplyTo == "" && m.Kind == kind && strings.Contains(m.Content, text) {
			return true
		}
	}
	return false
}

// A send to the leader reaches the chat, and so does a send to the
// standby, which forwards it; both answer with WeCom's outcome and name
// the node that sent it. A request forwarded once is not forwarded again:
// the standby answers 503 with the leader's address. WeCom's refusal of a
// chat that never talked to the bot is relayed.
func TestSendAPIOnTheLeaderAndThroughTheStandby(t *testing.T) {
	t.Parallel()
	c := startSendCluster(t, wecomsim.Config{}, nil)
	c.talk(t, "alice")

	ok := func(call sendCall, what string) {
		t.Helper()
		if call.code != http.StatusOK || call.res.ErrCode == nil || *call.res.ErrCode != 0 || call.res.ErrMsg != "ok" || call.res.Node != "n1" || call.res.Bot != "b1" {
			t.Fatalf("%s: %d %s, want 200 with errcode 0 from n1", what, call.code, call.raw)
		}
	}
	ok(postSend(t, c.n1.API, testToken, "b1", markdownTo("alice", "**from the leader**")), "send to the leader")
	if !pushed(c.sim, "alice", "markdown", "**from the leader**") {
		t.Fatalf("the leader's send is not in alice's chat: %+v", c.sim.Transcript("b1", "alice"))
	}
	ok(postSend(t, c.n2.API, testToken, "b1", markdownTo("alice", "through the standby")), "send to the standby")
	if !pushed(c.sim, "alice", "markdown", "through the standby") {
		t.Fatalf("the standby's forward is not in alice's chat: %+v", c.sim.Transcript("b1", "alice"))
	}
	card := `{"chat":"alice","chat_type":"single","msgtype":"template_card","template_card":{"card_type":"text_notice","main_title":{"title":"deploy done"}}}`
	ok(postSend(t, c.n2.API, testToken, "b1", card), "a card through the standby")
	if !pushed(c.sim, "alice", "template_card", "deploy done") {
		t.Fatalf("the card is not in alice's chat: %+v", c.sim.Transcript("b1", "alice"))
	}

	// Forwarded already: not forwarded again.
	again := postSend(t, c.n2.API, testToken, "b1", markdownTo("alice", "looping"), sendapi.ForwardedHeader, "n9")
	if again.code != http.StatusServiceUnavailable || again.res.Leader != c.n1.API || again.res.Error != "not the leader; retry at "+c.n1.API || again.header.Get("Retry-After") == "" {
		t.Fatalf("a forwarded request to the standby: %d %s (Retry-After %q), want 503 naming the leader %s", again.code, again.raw, again.header.Get("Retry-After"), c.n1.API)
	}
	if pushed(c.sim, "alice", "markdown", "looping") {
		t.Fatal("a request the standby did not forward was sent")
	}

	// A chat the bot may not message: WeCom's refusal, relayed through
	// the standby.
	for _, base := range []string{c.n1.API, c.n2.API} {
		no := postSend(t, base, testToken, "b1", markdownTo("nobody", "hi"))
		if no.code != http.StatusForbidden || no.res.ErrCode == nil || *no.res.ErrCode != wecom.ErrCodeChatNotFound || no.res.ErrMsg == "" {
			t.Fatalf("a send to a chat that never talked to the bot: %d %s, want 403 with WeCom's errcode %d", no.code, no.raw, wecom.ErrCodeChatNotFound)
		}
	}
	// The group chat type of a single chat: WeCom does not find it.
	if g := postSend(t, c.n1.API, testToken, "b1", `{"chat":"alice","chat_type":"group","msgtype":"markdown","markdown":{"content":"x"}}`); g.code != http.StatusForbidden {
		t.Fatalf("alice as a group: %d %s, want 403", g.code, g.raw)
	}

	m1, m2 := c.n1.scrape(t), c.n2.scrape(t)
	for _, want := range []string{`botctl_api_sends_total{bot="b1",outcome="sent"} 3`, `botctl_api_sends_total{bot="b1",outcome="refused"} 3`} {
		if !strings.Contains(m1, want) {
			t.Errorf("n1's metrics lack %s", want)
		}
	}
	for _, want := range []string{`botctl_api_sends_total{bot="b1",outcome="forwarded"} 3`, `botctl_api_sends_total{bot="b1",outcome="not_leader"} 1`} {
		if !strings.Contains(m2, want) {
			t.Errorf("n2's metrics lack %s", want)
		}
	}
}

// The send API asks for the token (401 without it or with another), knows
// only the node's bots (404), bounds the body (413), and names the field
// of a bad request (400), on the leader and on the standby alike, before
// anything is sent.
func TestSendAPIRefusesBadRequests(t *testing.T) {
	t.Parallel()
	c := startSendCluster(t, wecomsim.Config{}, nil)
	c.talk(t, "alice")
	before := len(c.sim.Transcript("b1", "alice"))
	good := markdownTo("alice", "hi")
	for _, base := range []string{c.n1.API, c.n2.API} {
		for _, token := range []string{"", strings.Repeat("f", len(testToken))} {
			if call := postSend(t, base, token, "b1", good); call.code != http.StatusUnauthorized {
				t.Errorf("%s with token %q: %d %s, want 401", base, token, call.code, call.raw)
			}
		}
		if call := postSend(t, base, testToken, "b9", good); call.code != http.StatusNotFound || !strings.Contains(call.res.Error, "b1") {
			t.Errorf("unknown bot b9: %d %s, want 404 naming b1", call.code, call.raw)
		}
		huge := markdownTo("alice", strings.Repeat("x", sendapi.MaxBodyBytes))
		if call := postSend(t, base, testToken, "b1", huge); call.code != http.StatusRequestEntityTooLarge {
			t.Errorf("a body over %d bytes: %d %s, want 413", sendapi.MaxBodyBytes, call.code, call.raw)
		}
		for _, tc := range []struct {
			name, body, field string
		}{
			{"not JSON", `{"chat":`, ""},
			{"two values", good + good, ""},
			{"unknown field", `{"chat":"alice","msgtype":"markdown","markdown":{"content":"x"},"safe":true}`, "safe"},
			{"WeCom's chatid", `{"chatid":"alice","msgtype":"markdown","markdown":{"content":"x"}}`, "chatid"},
			{"no chat", markdownTo("", "x"), "chat"},
			{"chat with a space", markdownTo("alice smith", "x"), "chat"},
			{"chat too long", markdownTo(strings.Repeat("a", sendapi.MaxChatBytes+1), "x"), "chat"},
			{"bad chat_type", `{"chat":"alice","chat_type":"1","msgtype":"markdown","markdown":{"content":"x"}}`, "chat_type"},
			{"no msgtype", `{"chat":"alice","markdown":{"content":"x"}}`, "msgtype"},
			{"text msgtype", `{"chat":"alice","msgtype":"text"}`, "msgtype"},
			{"unknown msgtype", `{"chat":"alice","msgtype":"image","markdown":{"content":"x"}}`, "msgtype"},
			{"no markdown", `{"chat":"alice","msgtype":"markdown"}`, "markdown.content"},
			{"empty content", markdownTo("alice", " \n"), "markdown.content"},
			{"content over WeCom's limit", markdownTo("alice", strings.Repeat("x", wecom.MaxContentBytes+1)), "markdown.content"},
			{"card with markdown", `{"chat":"alice","msgtype":"markdown","markdown":{"content":"x"},"template_card":{"card_type":"text_notice"}}`, "template_card"},
			{"no card", `{"chat":"alice","msgtype":"template_card"}`, "template_card"},
			{"card not an object", `{"chat":"alice","msgtype":"template_card","template_card":"text_notice"}`, "template_card"},
			{"card without card_type", `{"chat":"alice","msgtype":"template_card","template_card":{"main_title":{"title":"x"}}}`, "template_card.card_type"},
		} {
			call := postSend(t, base, testToken, "b1", tc.body)
			if call.code != http.StatusBadRequest || call.res.Field != tc.field || call.res.Error == "" {
				t.Errorf("%s: %s: %d %s, want 400 naming field %q", base, tc.name, call.code, call.raw, tc.field)
			}
		}
	}
	if got := len(c.sim.Transcript("b1", "alice")); got != before {
		t.Fatalf("refused requests sent %d messages", got-before)
	}
	if m := c.n1.scrape(t); !strings.Contains(m, `botctl_api_sends_total{bot="b1",outcome="invalid"} 19`) {
		t.Errorf("n1 did not count 19 invalid sends (18 bodies and 1 too large)")
	}
}

// API sends and a running answer in one conversation share its pace
// budget: together they never make WeCom refuse a frame (the simulator
// allows one frame a minute more than push.budget, for the milliseconds
// between a send's count and its arrival), a send past the budget is
// answered 429 with Retry-After at once, and the answer still ends.
func TestSendAPISharesTheConversationsBudgetWithAnswers(t *testing.T) {
	t.Parallel() // mostly waiting on time windows (quotas, elections, audits): beside the other long tests
	const budget = 10
	c := startSendCluster(t, wecomsim.Config{RateLimit: budget + 1}, func(cfg *config.Config) {
		cfg.Push.Budget = budget
		cfg.AI.Demo.AnswerTime = 5 * time.Second
	})
	if _, err := c.sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "carol", Text: "a long one"}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "carol's receipt", func() bool {
		for _, m := range c.sim.Transcript("b1", "carol") {
			if m.From == "bot" {
				return true
			}
		}
		return false
	})
	var sent int
	var throttled sendCall
	for i := 0; i < 2*budget && throttled.code == 0; i++ {
		// Through the standby too: the leader's budget is the one spent.
		base := []string{c.n1.API, c.n2.API}[i%2]
		call := postSend(t, base, testToken, "b1", markdownTo("carol", "note "+strconv.Itoa(i)))
		switch call.code {
		case http.StatusOK:
			sent++
		case http.StatusTooManyRequests:
			throttled = call
		default:
			t.Fatalf("send %d: %d %s", i, call.code, call.raw)
		}
	}
	if sent == 0 || sent >= budget || throttled.code == 0 {
		t.Fatalf("%d sends went, then %d %s: want fewer than %d (the receipt spent one), then 429", sent, throttled.code, throttled.raw, budget)
	}
	if ra, err := strconv.Atoi(throttled.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Fatalf("429 with Retry-After %q: want 1 to 60 seconds", throttled.header.Get("Retry-After"))
	}
	testwait.Eventually(t, 3*time.Minute, "carol's answer ends", func() bool { return answeredWith(c.sim, "carol", "a long one") })
	st, err := c.sim.Stats("b1")
	if err != nil {
		t.Fatal(err)
	}
	if st.QuotaRejections != 0 || st.QuotaDrops != 0 {
		t.Fatalf("WeCom refused %d frames and dropped %d for the quota: the sends went over the conversation's budget", st.QuotaRejections, st.QuotaDrops)
	}
	if m := c.n1.scrape(t); !strings.Contains(m, `botctl_api_sends_total{bot="b1",outcome="throttled"} 1`) {
		t.Errorf("n1 did not count the throttled send")
	}
}

// A standby without the cluster's shared api.token_file does not forward
// (the leader does not know its token): it answers 503 with the leader's
// address, why, and Retry-After, and nothing is sent.
func TestSendStandbyWithoutTheSharedTokenSaysWhereTheLeaderIs(t *testing.T) {
	t.Parallel()
	c := startSendCluster(t, wecomsim.Config{}, func(cfg *config.Config) {
		if cfg.NodeID == "n2" {
			cfg.API.TokenFile = ""
		}
	})
	c.talk(t, "alice")
	token, err := c.n2.cfg.API.CallerToken(c.n2.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	call := postSend(t, c.n2.API, token, "b1", markdownTo("alice", "not forwarded"))
	if call.code != http.StatusServiceUnavailable || call.res.Error != "not the leader; retry at "+c.n1.API || call.res.Leader != c.n1.API ||
		!strings.Contains(call.res.Reason, "api.token_file") || call.header.Get("Retry-After") == "" {
		t.Fatalf("a send to a standby without the shared token: %d %s (Retry-After %q), want 503 naming the leader %s and api.token_file",
			call.code, call.raw, call.header.Get("Retry-After"), c.n1.API)
	}
	if pushed(c.sim, "alice", "markdown", "not forwarded") {
		t.Fatal("a send the standby did not forward was sent")
	}
}
