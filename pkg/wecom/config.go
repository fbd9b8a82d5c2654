package wecom

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/redact"
	"github.com/rs/zerolog"
)

// Config configures one connection. Zero values take the defaults named on
// each field.
type Config struct {
	// URL is the WebSocket endpoint, e.g. wss://openws.work.weixin.qq.com.
	URL string
	// BotID and Secret authenticate the connection. The secret never
	// appears in logs or errors.
	BotID  string
	Secret string
	// DialTimeout bounds the dial and the subscribe ack together. Default 10s.
	DialTimeout time.Duration
	// HeartbeatInterval is the application ping period. Default 30s, as the
	// official SDK. Lower detects a dead connection sooner and costs frames.
	HeartbeatInterval time.Duration
	// MaxMissedPings is how many pings in a row may go unacked before the
	// connection is declared dead (ReasonHeartbeatLost). Default 2.
	MaxMissedPings int
	// AckTimeout is how long a frame waits for its ack. Default 5s, as the
	// official SDK. The next frame of the same req_id is sent only after the
	// ack or this timeout. Lower fails faster on a slow server but makes
	// late acks (and so ErrAckUnknown) more frequent.
	AckTimeout time.Duration
	// MaxAckTimeouts is how many frames in a row may time out waiting for
	// their ack before the connection is declared dead and closed
	// (ReasonAckTimeouts); any ack that arrives resets the count. Default 3.
	// Lower gives up on a stalled server sooner; higher rides out longer
	// stalls at the cost of more unknown outcomes on one connection.
	MaxAckTimeouts int
	// CallbackQueue is the most callbacks that may wait for the handlers.
	// Reading never pauses for a slow handler (acks and heartbeats share the
	// socket and would starve behind callbacks); when the queue is full the
	// connection is closed instead (ReasonBacklog), after the callbacks
	// already read are handed over. Default 1024. Higher absorbs longer
	// handler stalls at the cost of memory and of a longer drain at close.
	CallbackQueue int
	// Header is sent with the WebSocket handshake.
	Header http.Header
	// BeforeSubscribe, if set, is checked after the WebSocket handshake and
	// right before the subscribe frame is written; an error aborts the dial
	// (the socket is closed, nothing was sent). The election's last word:
	// a node whose term ended during the handshake never subscribes (an
	// *election.Term is a Precondition).
	BeforeSubscribe Precondition
	// Logger receives connection events; bot and conn fields are added.
	Logger zerolog.Logger
	// Frames, if set, counts frames: every callback read and every frame
	// sent with its outcome (for metrics; called on the hot path, so it
	// must not block).
	Frames FrameObserver
	// Clock is what heartbeats, ack timeouts and probe pings wait on.
	// Default clock.Real.
	Clock clock.Clock
}

// FrameObserver learns of frames on a connection. Errcode is the ack's
// errcode of a frame sent, or -1 when no ack came (timeout, closed,
// ambiguous).
type FrameObserver interface {
	FrameIn(bot, cmd string)
	FrameOut(bot, cmd string, errcode int)
}

// Precondition is a last check before a connection subscribes. Check
// returns nil if the dial may go on, or why it must not.
type Precondition interface {
	Check() error
}

func (c *Config) setDefaults() {
	if c.DialTimeout <= 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 30 * time.Second
	}
	if c.MaxMissedPings <= 0 {
		c.MaxMissedPings = 2
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = 5 * time.Second
	}
	if c.MaxAckTimeouts <= 0 {
		c.MaxAckTimeouts = 3
	}
	if c.CallbackQueue <= 0 {
		c.CallbackQueue = 1024
	}
}

func (c *Config) validate() error {
	switch {
	case c.URL == "":
		return errors.New("wecom: Config.URL is empty: set the WeCom WebSocket URL (wss://openws.work.weixin.qq.com, or the simulator's ws://127.0.0.1:PORT/)")
	case !strings.HasPrefix(c.URL, "ws://") && !strings.HasPrefix(c.URL, "wss://"):
		return fmt.Errorf("wecom: Config.URL %q: want a ws:// or wss:// URL", redact.URL(c.URL))
	case c.BotID == "":
		return errors.New("wecom: Config.BotID is empty")
	case c.Secret == "":
		return fmt.Errorf("wecom: bot %s: Config.Secret is empty", c.BotID)
	}
	return nil
}
