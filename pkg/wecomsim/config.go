package wecomsim

import (
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
)

// Defaults of Config.
const (
	DefaultStreamWindow  = 6 * time.Minute
	DefaultRateLimit     = 30
	DefaultRateWindow    = 60 * time.Second
	DefaultWelcomeWindow = 5 * time.Second
	DefaultUpdateWindow  = 5 * time.Second
	DefaultMediaLifetime = 5 * time.Minute
	// DefaultHourlyLimit and DefaultHourlyWindow: WeCom's second cap on
	// one conversation, 1,000 frames an hour.
	DefaultHourlyLimit  = 1000
	DefaultHourlyWindow = time.Hour
	// DefaultUploadRateLimit and DefaultUploadHourlyLimit cap one bot's
	// uploads per RateWindow and per HourlyWindow.
	DefaultUploadRateLimit   = 30
	DefaultUploadHourlyLimit = 1000
	// DefaultMaxFrameBytes fits the largest frame the official SDK may
	// send: a finishing stream frame with wecom.MaxMsgItems images of
	// MaxReplyImageBytes each, base64-encoded (about 134 MiB), plus
	// wecom.MaxFrameBytes for the rest. WeCom's own limit is not
	// published; it must take what its SDK documents.
	DefaultMaxFrameBytes = wecom.MaxMsgItems*4*((MaxReplyImageBytes+2)/3) + wecom.MaxFrameBytes
)

// Config tunes the simulator. The zero value of every field means its default.
type Config struct {
	// StreamWindow is how long a stream may live, counted from its FIRST
	// accepted frame; updates do not extend it. Default 6m, the strictest
	// value reported for WeCom. Lower it in tests to exercise expiry (846608).
	StreamWindow time.Duration
	// RateLimit is how many frames one conversation (bot + chat) accepts per
	// RateWindow, shared by replies, welcome, update and proactive pushes.
	// Default 30 (assumed). Over it: 45009.
	RateLimit int
	// RateWindow is the sliding window RateLimit counts over. Default 60s.
	RateWindow time.Duration
	// HourlyLimit is how many frames one conversation accepts per
	// HourlyWindow, beside RateLimit and shared the same way. Default 1000.
	HourlyLimit int
	// HourlyWindow is the sliding window HourlyLimit counts over. Default
	// 1h; tests shorten it (with RateWindow) to play an hour in seconds.
	HourlyWindow time.Duration
	// UploadRateLimit and UploadHourlyLimit cap one bot's uploads
	// (aibot_upload_media_init) per RateWindow and per HourlyWindow.
	// Defaults 30 and 1000. Over either: 45009, whatever QuotaMode.
	UploadRateLimit, UploadHourlyLimit int
	// QuotaMode is what a frame over the conversation's quota gets:
	// QuotaRefuse (default: errcode 45009, nothing changes) or QuotaDrop
	// (acked with errcode 0, never shown, counted quota_drops), as one
	// integration reports WeCom does. POST /control/quota sets it per bot.
	QuotaMode string
	// WelcomeWindow is how long after enter_chat a welcome reply is accepted.
	// Default 5s.
	WelcomeWindow time.Duration
	// UpdateWindow is how long after template_card_event a card update is
	// accepted. Default 5s.
	UpdateWindow time.Duration
	// RelaxReqIDBinding, when true, accepts a reply's req_id on any
	// connection of the bot. Default false, as WeCom: a req_id is valid only
	// on the connection that received its callback, so a reply owed across a
	// reconnect must go out as a proactive push.
	RelaxReqIDBinding bool
	// MaxFrameBytes is the largest frame read; a larger one closes the
	// connection with 1009. Default DefaultMaxFrameBytes.
	MaxFrameBytes int
	// Now is the clock every window is measured with. Default time.Now.
	Now func() time.Time
	// Clock is what the late_acks fault's held-back acks wait on (they are
	// due by the wall clock, not by Now). Default clock.Real.
	Clock clock.Clock
	// Logger receives one event per connection change, fault and rejected
	// frame. Secrets are never logged. Default: disabled.
	Logger zerolog.Logger
	// MediaLifetime is how long a media item's URL works from its
	// message's post. Default 5m, as WeCom's ("valid for five minutes").
	MediaLifetime time.Duration
	// MediaBaseURL is the base of media URLs in callbacks (e.g.
	// http://127.0.0.1:8390). Default: the scheme and host the bot's
	// subscribed connection dialed.
	MediaBaseURL string
	// Record, when true, starts the latency recorder at once (see
	// StartRecording and Recorded). Default false: nothing is recorded.
	Record bool
}

// Validate reports the first field that cannot be used, naming it. Zero
// values are fine: they mean the default.
func (c Config) Validate() error {
	switch {
	case c.StreamWindow < 0:
		return fmt.Errorf("wecomsim: StreamWindow %v: must be positive (or 0 for the default %v)", c.StreamWindow, DefaultStreamWindow)
	case c.RateLimit < 0:
		return fmt.Errorf("wecomsim: RateLimit %d: must be positive (or 0 for the default %d)", c.RateLimit, DefaultRateLimit)
	case c.RateWindow < 0:
		return fmt.Errorf("wecomsim: RateWindow %v: must be positive (or 0 for the default %v)", c.RateWindow, DefaultRateWindow)
	case c.HourlyLimit < 0:
		return fmt.Errorf("wecomsim: HourlyLimit %d: must be positive (or 0 for the default %d)", c.HourlyLimit, DefaultHourlyLimit)
	case c.HourlyWindow < 0:
		return fmt.Errorf("wecomsim: HourlyWindow %v: must be positive (or 0 for the default %v)", c.HourlyWindow, DefaultHourlyWindow)
	case c.UploadRateLimit < 0 || c.UploadHourlyLimit < 0:
		return fmt.Errorf("wecomsim: UploadRateLimit %d, UploadHourlyLimit %d: must be positive (or 0 for the defaults %d, %d)", c.UploadRateLimit, c.UploadHourlyLimit, DefaultUploadRateLimit, DefaultUploadHourlyLimit)
	case c.QuotaMode != "" && !validQuotaMode(c.QuotaMode):
		return fmt.Errorf("wecomsim: QuotaMode %q: want %s (or empty for %s)", c.QuotaMode, quotaModes, QuotaRefuse)
	case c.WelcomeWindow < 0:
		return fmt.Errorf("wecomsim: WelcomeWindow %v: must be positive (or 0 for the default %v)", c.WelcomeWindow, DefaultWelcomeWindow)
	case c.UpdateWindow < 0:
		return fmt.Errorf("wecomsim: UpdateWindow %v: must be positive (or 0 for the default %v)", c.UpdateWindow, DefaultUpdateWindow)
	case c.MediaLifetime < 0:
		return fmt.Errorf("wecomsim: MediaLifetime %v: must be positive (or 0 for the default %v)", c.MediaLifetime, DefaultMediaLifetime)
	case c.MaxFrameBytes < 0:
		return fmt.Errorf("wecomsim: MaxFrameBytes %d: must be positive (or 0 for the default %d)", c.MaxFrameBytes, DefaultMaxFrameBytes)
	}
	return nil
}

// withDefaults replaces zero (and, defensively, negative) values by defaults.
func (c Config) withDefaults() Config {
	if c.StreamWindow <= 0 {
		c.StreamWindow = DefaultStreamWindow
	}
	if c.RateLimit <= 0 {
		c.RateLimit = DefaultRateLimit
	}
	if c.RateWindow <= 0 {
		c.RateWindow = DefaultRateWindow
	}
	if c.HourlyLimit <= 0 {
		c.HourlyLimit = DefaultHourlyLimit
	}
	if c.HourlyWindow <= 0 {
		c.HourlyWindow = DefaultHourlyWindow
	}
	if c.UploadRateLimit <= 0 {
		c.UploadRateLimit = DefaultUploadRateLimit
	}
	if c.UploadHourlyLimit <= 0 {
		c.UploadHourlyLimit = DefaultUploadHourlyLimit
	}
	if !validQuotaMode(c.QuotaMode) {
		c.QuotaMode = QuotaRefuse
	}
	if c.WelcomeWindow <= 0 {
		c.WelcomeWindow = DefaultWelcomeWindow
	}
	if c.UpdateWindow <= 0 {
		c.UpdateWindow = DefaultUpdateWindow
	}
	if c.MediaLifetime <= 0 {
		c.MediaLifetime = DefaultMediaLifetime
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}
