package wecomsim

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
	"go.uber.org/goleak"
)

// The hourly cap holds beside the minute's: a conversation that keeps
// under 30 a minute still gets 45009 past 1,000 in an hour, shared by
// stream frames and pushes; the hour slides like the minute.
func TestHourlyQuota(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{StreamWindow: 2 * time.Hour}) // one stream the whole hour
	defer h.close()
	c := h.subscribe(bot1, secret1)
	reqID, _ := h.askAndReceive(c, "alice", "hi")
	sent := 0
	for minute := 0; sent < DefaultHourlyLimit; minute++ {
		for i := 0; i < DefaultRateLimit && sent < DefaultHourlyLimit; i++ {
			if sent%2 == 0 {
				wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", fmt.Sprint(sent), false)), 0)
			} else {
				wantCode(t, c.call(wecom.CmdSendMsg, "", wecom.SendMsgBody{ChatID: "alice", MsgType: "markdown", Markdown: &wecom.TextContent{Content: fmt.Sprint(sent)}}), 0)
			}
			sent++
		}
		h.clock.Advance(time.Minute)
	}
	// 34 minutes in, 1,000 accepted: the minute has room, the hour not.
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "one too many", false)), wecom.ErrCodeRateLimited)
	wantCode(t, c.call(wecom.CmdSendMsg, "", wecom.SendMsgBody{ChatID: "alice", MsgType: "markdown", Markdown: &wecom.TextContent{Content: "over"}}), wecom.ErrCodeRateLimited)
	// Another conversation has its own hour.
	h.post(MessageRequest{BotID: bot1, UserID: "bob", Text: "x"})
	wantCode(t, c.call(wecom.CmdSendMsg, "", wecom.SendMsgBody{ChatID: "bob", MsgType: "markdown", Markdown: &wecom.TextContent{Content: "hi bob"}}), 0)
	// An hour after the first minute's 30, they have left the window.
	h.clock.Advance(time.Hour - 33*time.Minute)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "later", false)), 0)
	if st := h.stats(bot1); st.QuotaRejections != 2 || st.QuotaDrops != 0 || st.QuotaMode != QuotaRefuse {
		t.Fatalf("stats %+v", st)
	}
}

// In drop mode a frame over the quota is acked with errcode 0 but never
// shown, and counted quota_drops; refuse mode (the default) answers 45009.
// The mode is set by Config and per bot by the control API.
func TestQuotaDropMode(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{RateLimit: 2, QuotaMode: QuotaDrop})
	defer h.close()
	c := h.subscribe(bot1, secret1)
	reqID, _ := h.askAndReceive(c, "alice", "hi")
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "1", false)), 0)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "12", false)), 0)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "123", true)), 0)
	wantCode(t, c.call(wecom.CmdSendMsg, "", wecom.SendMsgBody{ChatID: "alice", MsgType: "markdown", Markdown: &wecom.TextContent{Content: "pushed"}}), 0)
	tr := h.srv.Transcript(bot1, "alice")
	if len(tr) != 2 || tr[1].Content != "12" || tr[1].Finished {
		t.Fatalf("dropped frames shown: %+v", tr)
	}
	st := h.stats(bot1)
	if st.QuotaDrops != 2 || st.QuotaRejections != 0 || st.Errors["45009"] != 0 || st.QuotaMode != QuotaDrop {
		t.Fatalf("stats %+v", st)
	}

	// The control API switches the bot to refuse mode, and back.
	if code, res := h.httpDo(http.MethodPost, "/control/quota", map[string]any{"bot_id": bot1, "mode": "refuse"}); code != 200 || res["mode"] != "refuse" {
		t.Fatalf("POST /control/quota: %d %v", code, res)
	}
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "123", true)), wecom.ErrCodeRateLimited)
	if code, res := h.httpDo(http.MethodGet, "/control/stats?bot_id="+bot1, nil); code != 200 || res["quota_mode"] != "refuse" || res["quota_drops"] != 2.0 {
		t.Fatalf("stats: %d %v", code, res)
	}
	if code, res := h.httpDo(http.MethodPost, "/control/quota", map[string]any{"bot_id": bot1, "mode": "maybe"}); code != 400 || res["error"] == nil {
		t.Fatalf("bad mode: %d %v", code, res)
	}
	if code, _ := h.httpDo(http.MethodPost, "/control/quota", map[string]any{"bot_id": "nobody", "mode": "drop"}); code != 404 {
		t.Fatalf("unknown bot: %d", code)
	}
	if err := (Config{QuotaMode: "sometimes"}).Validate(); err == nil {
		t.Fatal("bad QuotaMode accepted")
	}
}

// Uploads have their own caps per bot, 30 a minute and 1,000 an hour;
// over either: 45009, in drop mode too (an upload's ack carries its id).
func TestUploadQuota(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{UploadRateLimit: 2, UploadHourlyLimit: 3, QuotaMode: QuotaDrop})
	defer h.close()
	c := h.subscribe(bot1, secret1)
	initUpload := func() wecom.Frame {
		return c.call(wecom.CmdUploadMediaInit, "", wecom.UploadInitBody{Type: "file", Filename: "a.txt", TotalSize: 3, TotalChunks: 1})
	}
	wantCode(t, initUpload(), 0)
	wantCode(t, initUpload(), 0)
	wantCode(t, initUpload(), wecom.ErrCodeRateLimited)
	h.clock.Advance(time.Minute)
	wantCode(t, initUpload(), 0)
	wantCode(t, initUpload(), wecom.ErrCodeRateLimited) // the hour's 3
	h.clock.Advance(time.Hour)
	wantCode(t, initUpload(), 0)
	if st := h.stats(bot1); st.QuotaRejections != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// stream_unsupported answers every stream frame to one chat with 600039;
// markdown pushes to it and streams to other chats still land.
func TestStreamUnsupportedFault(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()
	c := h.subscribe(bot1, secret1)
	if code, res := h.httpDo(http.MethodPost, "/control/faults", map[string]any{"bot_id": bot1, "action": "stream_unsupported"}); code != 400 || res["error"] == nil {
		t.Fatalf("without chat: %d %v", code, res)
	}
	if code, res := h.httpDo(http.MethodPost, "/control/faults", map[string]any{"bot_id": bot1, "action": "stream_unsupported", "chat": "alice"}); code != 200 {
		t.Fatalf("fault: %d %v", code, res)
	}
	reqID, _ := h.askAndReceive(c, "alice", "hi")
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "a", false)), wecom.ErrCodeDeviceUnsupported)
	wantCode(t, c.call(wecom.CmdSendMsg, "", wecom.SendMsgBody{ChatID: "alice", MsgType: "markdown", Markdown: &wecom.TextContent{Content: "pushed"}}), 0)
	bobReq, _ := h.askAndReceive(c, "bob", "hi")
	wantCode(t, c.call(wecom.CmdRespondMsg, bobReq, streamBody("s2", "b", true)), 0)
	tr := h.srv.Transcript(bot1, "alice")
	if len(tr) != 2 || tr[1].Kind != wecom.MsgTypeMarkdown {
		t.Fatalf("alice's transcript %+v", tr)
	}
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: FaultClear}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, streamBody("s1", "a", true)), 0)
	if st := h.stats(bot1); st.Errors["600039"] != 1 {
		t.Fatalf("stats %+v", st)
	}
}
