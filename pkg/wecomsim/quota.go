package wecomsim

// The quota: WeCom's per-conversation caps on what a bot sends, and what
// happens to a frame over them.
//
// Integrations quoting WeCom's documentation give 30 frames a minute and
// 1,000 an hour per conversation, shared by every reply and push, and 30
// uploads a minute and 1,000 an hour; one says a frame over the limit is
// silently dropped rather than refused. Both behaviours are modes here
// (QuotaMode): refuse (45009, the default) and drop (acked with errcode 0,
// never shown, counted quota_drops).

import (
	"fmt"
	"net/http"
	"time"

	"github.com/botctl/botctl/internal/httpjson"
	"github.com/botctl/botctl/pkg/wecom"
)

// Quota modes (Config.QuotaMode, botctl sim --quota-mode, POST /control/quota).
const (
	// QuotaRefuse answers a frame over the quota with 45009.
	QuotaRefuse = "refuse"
	// QuotaDrop acks a frame over the quota with errcode 0 and drops it: the
	// user never sees it, and a bot cannot tell from the ack.
	QuotaDrop = "drop"
)

const quotaModes = "refuse or drop"

func validQuotaMode(m string) bool { return m == QuotaRefuse || m == QuotaDrop }

// overQuota reports which cap times (a conversation's or the uploads'
// accepted frame times, oldest first) leave no room for one more at now,
// pruning what is older than every window; "" when there is room.
func overQuota(times *[]time.Time, now time.Time, caps []quotaCap, what string) string {
	longest := time.Duration(0)
	for _, c := range caps {
		longest = max(longest, c.window)
	}
	s := *times
	cut := 0
	for cut < len(s) && !s[cut].After(now.Add(-longest)) {
		cut++
	}
	if cut > 0 {
		s = append(s[:0:0], s[cut:]...)
		*times = s
	}
	for _, c := range caps {
		n := 0
		for i := len(s) - 1; i >= 0 && s[i].After(now.Add(-c.window)); i-- {
			n++
		}
		if n >= c.limit {
			return fmt.Sprintf("at most %d %s per %v", c.limit, what, c.window)
		}
	}
	return ""
}

// quotaCap is one cap: limit accepted frames in any sliding window.
type quotaCap struct {
	limit  int
	window time.Duration
}

// frameCaps are the caps of one conversation's frames.
func (s *Server) frameCaps() []quotaCap {
	return []quotaCap{{s.cfg.RateLimit, s.cfg.RateWindow}, {s.cfg.HourlyLimit, s.cfg.HourlyWindow}}
}

// uploadCaps are the caps of one bot's uploads.
func (s *Server) uploadCaps() []quotaCap {
	return []quotaCap{{s.cfg.UploadRateLimit, s.cfg.RateWindow}, {s.cfg.UploadHourlyLimit, s.cfg.HourlyWindow}}
}

// quotaMode is bot b's mode now. Call with b.mu held.
func (c *conn) quotaMode(b *bot) string {
	if b.quotaMode != "" {
		return b.quotaMode
	}
	return c.s.cfg.QuotaMode
}

// quotaCheck is the last check before a frame is applied: ok when chat may
// accept one more frame. Over the quota, the verdict is 45009 (refuse
// mode) or an ack of 0 for a frame that is not applied (drop mode: the
// caller returns it and changes nothing). Call with b.mu held.
func (c *conn) quotaCheck(b *bot, chat string, now time.Time) (result, bool) {
	times := b.sent[chat]
	over := overQuota(&times, now, c.s.frameCaps(), "frames")
	b.sent[chat] = times
	if over == "" {
		return accepted, true
	}
	if c.quotaMode(b) == QuotaDrop {
		b.stats.QuotaDrops++
		return result{dropped: true}, false
	}
	b.stats.QuotaRejections++
	return fail(wecom.ErrCodeRateLimited, "api freq out of limit: %s per conversation", over), false
}

// uploadQuotaCheck admits one more upload of bot b (counted on
// aibot_upload_media_init), else 45009 in either mode: an upload's ack
// carries its upload_id, there is nothing to drop silently. Call with
// b.mu held.
func (c *conn) uploadQuotaCheck(b *bot, now time.Time) (result, bool) {
	if over := overQuota(&b.uploadTimes, now, c.s.uploadCaps(), "uploads"); over != "" {
		b.stats.QuotaRejections++
		return fail(wecom.ErrCodeRateLimited, "api freq out of limit: %s per bot", over), false
	}
	b.uploadTimes = append(b.uploadTimes, now)
	return accepted, true
}

// QuotaRequest sets a bot's quota mode (POST /control/quota).
type QuotaRequest struct {
	BotID string `json:"bot_id"`
	// Mode is refuse (45009) or drop (acked 0, never shown).
	Mode string `json:"mode"`
}

// SetQuotaMode sets what bot id's conversations do with a frame over the
// quota: QuotaRefuse or QuotaDrop.
func (s *Server) SetQuotaMode(req QuotaRequest) error {
	b, err := s.needBot(req.BotID)
	if err != nil {
		return err
	}
	if !validQuotaMode(req.Mode) {
		return invalid("mode %q: want %s", req.Mode, quotaModes)
	}
	b.mu.Lock()
	b.quotaMode = req.Mode
	b.mu.Unlock()
	s.log.Info().Str("bot", b.id).Str("quota_mode", req.Mode).Msg("quota mode set")
	return nil
}

func (s *Server) httpQuota(w http.ResponseWriter, r *http.Request) {
	var req QuotaRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if err := s.SetQuotaMode(req); err != nil {
		writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"bot_id": req.BotID, "mode": req.Mode})
}
