package wecomsim

import (
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
	"github.com/gorilla/websocket"
	"go.uber.org/goleak"
)

func keys(m map[string]any) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

func hasKeys(t *testing.T, what string, m map[string]any, want ...string) {
	t.Helper()
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Fatalf("%s: field %q missing (have %s)", what, k, keys(m))
		}
	}
}

func TestControlAPIContract(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)

	code, res := h.httpDo("POST", "/control/messages", map[string]any{"bot_id": bot1, "user_id": "alice", "text": "hi"})
	if code != 200 {
		t.Fatalf("messages: %d %v", code, res)
	}
	hasKeys(t, "messages", res, "msgid", "seq", "delivered")
	if res["delivered"] != true || res["seq"].(float64) != 1 {
		t.Fatalf("messages: %v", res)
	}
	reqID, _ := c.msgCallback()
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "hello alice", true)), 0)

	code, res = h.httpDo("POST", "/control/messages", map[string]any{"bot_id": bot1, "user_id": "bob", "text": "hi all", "chat_type": "group", "chat_id": "g1"})
	if code != 200 || res["seq"].(float64) != 3 {
		t.Fatalf("group message: %d %v", code, res)
	}
	c.msgCallback()

	code, res = h.httpDo("POST", "/control/events", map[string]any{"bot_id": bot1, "user_id": "alice", "eventtype": "enter_chat"})
	if code != 200 {
		t.Fatalf("events: %d %v", code, res)
	}
	hasKeys(t, "events", res, "msgid", "req_id", "delivered")
	evReq, _ := c.eventCallback()
	if res["req_id"] != evReq {
		t.Fatalf("events req_id %v, callback %s", res["req_id"], evReq)
	}

	code, res = h.httpDo("GET", "/control/transcript?bot_id=bot1&chat=alice", nil)
	if code != 200 {
		t.Fatalf("transcript: %d %v", code, res)
	}
	msgs := res["messages"].([]any)
	if len(msgs) != 2 {
		t.Fatalf("transcript %v", msgs)
	}
	for _, m := range msgs {
		hasKeys(t, "transcript entry", m.(map[string]any), "seq", "from", "msgid", "reply_to", "kind", "content", "finished", "expired")
	}
	reply := msgs[1].(map[string]any)
	if reply["from"] != "bot" || reply["kind"] != "stream" || reply["content"] != "hello alice" || reply["finished"] != true || reply["reply_to"] != msgs[0].(map[string]any)["msgid"] {
		t.Fatalf("reply entry %v", reply)
	}
	code, res = h.httpDo("GET", "/control/transcript?bot_id=bot1&chat=nobody", nil)
	if code != 200 || len(res["messages"].([]any)) != 0 {
		t.Fatalf("empty transcript: %d %v", code, res)
	}

	code, res = h.httpDo("GET", "/control/stats?bot_id=bot1", nil)
	if code != 200 {
		t.Fatalf("stats: %d %v", code, res)
	}
	hasKeys(t, "stats", res, "connections", "kicks", "auth_failures", "quota_rejections", "expired_updates",
		"invalid_req_ids", "undelivered", "frames", "malformed", "not_subscribed", "connected")
	if res["connections"].(float64) != 1 || res["frames"].(map[string]any)[wecom.CmdRespondMsg].(float64) != 1 {
		t.Fatalf("stats %v", res)
	}

	code, res = h.httpDo("GET", "/control/history?bot_id=bot1", nil)
	if code != 200 {
		t.Fatalf("history: %d %v", code, res)
	}
	hist := res["messages"].([]any)
	if len(hist) != 2 {
		t.Fatalf("history %v", hist)
	}
	hasKeys(t, "history entry", hist[1].(map[string]any), "seq", "msgid", "chat", "chat_type", "user_id", "text", "create_time", "delivered")
	if g := hist[1].(map[string]any); g["chat"] != "g1" || g["chat_type"] != "group" || g["user_id"] != "bob" || g["seq"].(float64) != 3 {
		t.Fatalf("history entry %v", g)
	}

	code, res = h.httpDo("POST", "/control/bots", map[string]any{"bot_id": "bot3", "secret": "s3"})
	if code != http.StatusCreated {
		t.Fatalf("bots: %d %v", code, res)
	}
	holder := h.subscribe("bot3", "s3")
	// A secret regenerated in the console: the holder stays until a
	// subscribe with the new one replaces it.
	if code, res = h.httpDo("POST", "/control/bots/secret", map[string]any{"bot_id": "bot3", "secret": "s3-new"}); code != 200 || res["bot_id"] != "bot3" {
		t.Fatalf("bots/secret: %d %v", code, res)
	}
	if st := h.stats("bot3"); !st.Connected || st.Kicks != 0 {
		t.Fatalf("after the secret changed: %+v, want the holder kept", st)
	}
	h.subscribe("bot3", "s3-new")
	holder.closed()
	if st := h.stats("bot3"); st.Kicks != 1 || !st.Connected {
		t.Fatalf("after the new secret's subscribe: %+v, want the holder kicked", st)
	}
	code, res = h.httpDo("GET", "/control/bots", nil)
	if code != 200 || strings.Contains(keys(res), "secret") || len(res["bots"].([]any)) != 3 {
		t.Fatalf("bots list: %d %v", code, res)
	}

	code, res = h.httpDo("POST", "/control/faults", map[string]any{"bot_id": bot1, "action": "stall_acks", "seconds": 1})
	if code != 200 {
		t.Fatalf("faults: %d %v", code, res)
	}
	code, res = h.httpDo("POST", "/control/faults", map[string]any{"bot_id": bot1, "action": "group_silence", "seconds": 5})
	if code != 200 {
		t.Fatalf("group_silence: %d %v", code, res)
	}
	if code, res = h.httpDo("GET", "/control/stats?bot_id="+bot1, nil); code != 200 || res["groups_silenced"] != true {
		t.Fatalf("stats after group_silence: %d %v", code, res)
	}
}

func TestControlAPIErrors(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	for _, tc := range []struct {
		method, path string
		body         any
		status       int
		mention      string
	}{
		{"POST", "/control/messages", map[string]any{"bot_id": "ghost", "user_id": "u", "text": "x"}, 404, "ghost"},
		{"POST", "/control/messages", `{"bot_id":`, 400, "JSON"},
		{"POST", "/control/messages", ``, 400, "empty"},
		{"POST", "/control/messages", map[string]any{"user_id": "u", "text": "x"}, 400, "bot_id"},
		{"POST", "/control/messages", map[string]any{"bot_id": bot1, "text": "x"}, 400, "user_id"},
		{"POST", "/control/messages", map[string]any{"bot_id": bot1, "user_id": "u"}, 400, "text"},
		{"POST", "/control/messages", map[string]any{"bot_id": bot1, "user_id": "u", "text": "x", "chat_type": "group"}, 400, "chat_id"},
		{"POST", "/control/messages", map[string]any{"bot_id": bot1, "user_id": "u", "text": "x", "chat_type": "room"}, 400, "chat_type"},
		{"POST", "/control/messages", map[string]any{"bot_id": bot1, "user_id": "u", "text": "x", "msgtype": "sticker"}, 400, "msgtype"},
		{"POST", "/control/events", map[string]any{"bot_id": bot1, "user_id": "u"}, 400, "eventtype"},
		{"POST", "/control/events", map[string]any{"bot_id": bot1, "user_id": "u", "eventtype": "disconnected_event"}, 400, "disconnected_event"},
		{"POST", "/control/events", map[string]any{"bot_id": bot1, "user_id": "u", "eventtype": "enter_chat", "chat_type": "group", "chat_id": "g"}, 400, "single"},
		{"GET", "/control/transcript?bot_id=bot1", nil, 400, "chat"},
		{"GET", "/control/transcript?bot_id=ghost&chat=u", nil, 404, "ghost"},
		{"GET", "/control/stats", nil, 400, "bot_id"},
		{"GET", "/control/stats?bot_id=ghost", nil, 404, "ghost"},
		{"GET", "/control/history?bot_id=bot1&after_seq=-1", nil, 400, "after_seq"},
		{"GET", "/control/history?bot_id=bot1&limit=x", nil, 400, "limit"},
		{"GET", "/control/history?bot_id=bot1&since=yesterday", nil, 400, "RFC 3339"},
		{"POST", "/control/faults", map[string]any{"bot_id": bot1, "action": "explode"}, 400, "explode"},
		{"POST", "/control/faults", map[string]any{"bot_id": bot1}, 400, "action"},
		{"POST", "/control/faults", map[string]any{"bot_id": bot1, "action": "silence"}, 400, "seconds"},
		{"POST", "/control/faults", map[string]any{"bot_id": bot1, "action": "group_silence", "seconds": -1}, 400, "group_silence"},
		{"POST", "/control/bots", map[string]any{"bot_id": bot1, "secret": "x"}, 409, bot1},
		{"POST", "/control/bots", map[string]any{"bot_id": "b"}, 400, "secret"},
		{"POST", "/control/bots/secret", map[string]any{"bot_id": "ghost", "secret": "x"}, 404, "ghost"},
		{"POST", "/control/bots/secret", map[string]any{"bot_id": bot1}, 400, "secret"},
		{"GET", "/control/bots/secret", nil, 405, "POST"},
		{"GET", "/control/messages", nil, 405, "POST"},
		{"GET", "/control/nothing", nil, 404, "/control/nothing"},
		{"GET", "/elsewhere", nil, 404, "/elsewhere"},
		{"GET", "/", nil, http.StatusUpgradeRequired, "WebSocket"},
	} {
		code, res := h.httpDo(tc.method, tc.path, tc.body)
		msg, _ := res["error"].(string)
		if code != tc.status || !strings.Contains(msg, tc.mention) {
			t.Errorf("%s %s %v: %d %q, want %d mentioning %q", tc.method, tc.path, tc.body, code, msg, tc.status, tc.mention)
		}
	}
}

func TestHistory(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	start := h.clock.Now()
	for i := 0; i < 5; i++ {
		h.post(MessageRequest{BotID: bot1, UserID: "alice", Text: string(rune('a' + i))})
		h.clock.Advance(time.Minute)
	}
	got, err := h.srv.History(HistoryQuery{BotID: bot1, AfterSeq: 2, Limit: 2})
	if err != nil || len(got) != 2 || got[0].Seq != 3 || got[1].Seq != 4 || got[0].Text != "c" || got[0].Delivered {
		t.Fatalf("after_seq/limit: %+v %v", got, err)
	}
	got, _ = h.srv.History(HistoryQuery{BotID: bot1, Since: start.Add(time.Minute), Until: start.Add(3 * time.Minute)})
	if len(got) != 2 || got[0].Seq != 2 || got[1].Seq != 3 {
		t.Fatalf("since/until: %+v", got)
	}
	q := url.Values{"bot_id": {bot1}, "since": {start.Add(4 * time.Minute).Format(time.RFC3339)}}
	code, res := h.httpDo("GET", "/control/history?"+q.Encode(), nil)
	if code != 200 || len(res["messages"].([]any)) != 1 {
		t.Fatalf("http since: %d %v", code, res)
	}
	q = url.Values{"bot_id": {bot1}, "until": {start.Add(90 * time.Second).Format(time.RFC3339)}, "after_seq": {"1"}}
	code, res = h.httpDo("GET", "/control/history?"+q.Encode(), nil)
	if code != 200 || len(res["messages"].([]any)) != 1 {
		t.Fatalf("http until: %d %v", code, res)
	}
}

func TestUndeliveredWithoutConnection(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	res := h.post(MessageRequest{BotID: bot1, UserID: "alice", Text: "anyone?"})
	if res.Delivered || res.ReqID != "" || res.Seq != 1 {
		t.Fatalf("result %+v", res)
	}
	ev := h.event(EventRequest{BotID: bot1, UserID: "alice", EventType: wecom.EventEnterChat})
	if ev.Delivered {
		t.Fatalf("event %+v", ev)
	}
	if st := h.stats(bot1); st.Undelivered != 2 {
		t.Fatalf("stats %+v", st)
	}
	hist, _ := h.srv.History(HistoryQuery{BotID: bot1})
	if len(hist) != 1 || hist[0].Delivered {
		t.Fatalf("history %+v", hist)
	}
	// The chat exists: a later connection may push to it.
	c := h.subscribe(bot1, secret1)
	wantCode(t, c.call(wecom.CmdSendMsg, "", wecom.SendMsgBody{ChatID: "alice", MsgType: "markdown", Markdown: &wecom.TextContent{Content: "sorry, I was away"}}), 0)
}

func TestFaultDrop(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultDrop}); err != nil {
		t.Fatal(err)
	}
	err := c.closed()
	var ce *websocket.CloseError
	if ok := asCloseError(err, &ce); ok && ce.Code != websocket.CloseAbnormalClosure {
		t.Fatalf("drop sent a close frame: %v", err)
	}
	for _, f := range c.held {
		if f.Cmd == wecom.CmdEventCallback {
			t.Fatalf("drop sent %+v", f)
		}
	}
	if st := h.stats(bot1); st.Drops != 1 || st.Connected || st.Kicks != 0 {
		t.Fatalf("stats %+v", st)
	}
	if res := h.post(MessageRequest{BotID: bot1, UserID: "alice", Text: "x"}); res.Delivered {
		t.Fatal("delivered after drop")
	}
	h.subscribe(bot1, secret1)
}

// drop_on_reply drops the connection when the named message's first
// reply comes, without applying it: replies to other messages land, and
// the fault fires once.
func TestFaultDropOnReply(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	if code, res := h.httpDo(http.MethodPost, "/control/faults", map[string]any{"bot_id": bot1, "action": "drop_on_reply"}); code != 400 || res["error"] == nil {
		t.Fatalf("without msgid: %d %v", code, res)
	}
	c := h.subscribe(bot1, secret1)
	if code, res := h.httpDo(http.MethodPost, "/control/faults", map[string]any{"bot_id": bot1, "action": "drop_on_reply", "msgid": "m-doomed"}); code != 200 {
		t.Fatalf("fault: %d %v", code, res)
	}
	other, _ := h.askAndReceive(c, "bob", "hi")
	wantCode(t, c.call(wecom.CmdRespondMsg, other, streamBody("s1", "for bob", true)), 0)
	res := h.post(MessageRequest{BotID: bot1, UserID: "alice", Text: "hi", MsgID: "m-doomed"})
	if !res.Delivered {
		t.Fatalf("not delivered: %+v", res)
	}
	reqID, _ := c.msgCallback()
	c.send(wecom.CmdRespondMsg, reqID, streamBody("s2", "never shown", true))
	err := c.closed()
	var ce *websocket.CloseError
	if ok := asCloseError(err, &ce); ok && ce.Code != websocket.CloseAbnormalClosure {
		t.Fatalf("drop_on_reply sent a close frame: %v", err)
	}
	for _, f := range c.held {
		if f.IsAck() && f.Headers.ReqID == reqID {
			t.Fatalf("the reply that dropped the connection was acked: %+v", f)
		}
	}
	if tr := h.srv.Transcript(bot1, "alice"); len(tr) != 1 {
		t.Fatalf("alice's transcript %+v: the dropping reply must not be applied", tr)
	}
	if st := h.stats(bot1); st.Drops != 1 || st.Connected {
		t.Fatalf("stats %+v", st)
	}
	// Once: the next connection's reply to the same message (a replayed
	// callback) lands.
	c = h.subscribe(bot1, secret1)
	h.post(MessageRequest{BotID: bot1, UserID: "alice", MsgID: "m-doomed"})
	reqID, _ = c.msgCallback()
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s3", "shown", true)), 0)
}

func TestFaultStallAcks(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	other := h.subscribe(bot2, secret2)
	reqID, _ := h.askAndReceive(c, "alice", "hi")
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultStallAcks, Seconds: 30}); err != nil {
		t.Fatal(err)
	}
	c.send(wecom.CmdPing, "", nil)
	c.send(wecom.CmdRespondMsg, reqID, streamBody("s1", "processed anyway", true))
	wantCode(t, other.call(wecom.CmdPing, "", nil), 0) // other bots unaffected
	// Frames are processed: wait for the transcript, not for an ack.
	deadline := time.Now().Add(wait)
	for {
		tr := h.srv.Transcript(bot1, "alice")
		if len(tr) == 2 && tr[1].Finished {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stalled frame not processed: %+v", tr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.silent()
	if st := h.stats(bot1); !st.AcksStalled || st.Frames[wecom.CmdPing] != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Callbacks still flow during a stall.
	h.askAndReceive(c, "alice", "still there?")

	h.clock.Advance(31 * time.Second)
	wantCode(t, c.call(wecom.CmdPing, "", nil), 0)
}

func TestFaultSilence(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()

	c := h.subscribe(bot1, secret1)
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultSilence, Seconds: 10}); err != nil {
		t.Fatal(err)
	}
	res := h.post(MessageRequest{BotID: bot1, UserID: "alice", Text: "hello?"})
	if res.Delivered {
		t.Fatalf("delivered during silence: %+v", res)
	}
	wantCode(t, c.call(wecom.CmdPing, "", nil), 0) // acks continue
	if st := h.stats(bot1); st.Undelivered != 1 || !st.Silenced {
		t.Fatalf("stats %+v", st)
	}
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultClear}); err != nil {
		t.Fatal(err)
	}
	h.askAndReceive(c, "alice", "now?")
	for _, f := range c.held {
		if f.Cmd == wecom.CmdMsgCallback {
			t.Fatalf("silenced message was delivered: %+v", f)
		}
	}
}

func asCloseError(err error, target **websocket.CloseError) bool {
	ce, ok := err.(*websocket.CloseError)
	if ok {
		*target = ce
	}
	return ok
}

// Many bots at once under -race: state per bot, no cross-talk.
func TestConcurrentBots(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{RateLimit: 1000})
	defer h.close()

	const n = 8
	for i := 0; i < n; i++ {
		if err := h.srv.AddBot("cb"+string(rune('a'+i)), "s"); err != nil {
			t.Fatal(err)
		}
	}
	clients := make([]*client, n)
	for i := range clients {
		clients[i] = h.subscribe("cb"+string(rune('a'+i)), "s")
	}
	errc := make(chan string, n)
	for i := range clients {
		go func(i int) {
			id := "cb" + string(rune('a'+i))
			for j := 0; j < 20; j++ {
				res, err := h.srv.PostMessage(MessageRequest{BotID: id, UserID: "u", Text: "x"})
				if err != nil || !res.Delivered {
					errc <- id + ": not delivered"
					return
				}
			}
			errc <- ""
		}(i)
	}
	for i := 0; i < n; i++ {
		if e := <-errc; e != "" {
			t.Fatal(e)
		}
	}
	for i, c := range clients {
		for j := 0; j < 20; j++ {
			reqID, m := c.msgCallback()
			if m.AIBotID != "cb"+string(rune('a'+i)) {
				t.Fatalf("cross-talk: %+v", m)
			}
			wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s"+m.MsgID, "ok", true)), 0)
		}
	}
}
