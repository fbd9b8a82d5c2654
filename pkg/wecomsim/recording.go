package wecomsim

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botctl/botctl/internal/httpjson"
	"github.com/botctl/botctl/pkg/wecom"
)

// Recording: an opt-in log of timed events for latency measurements
// (test/load). Off by default; when off, the only cost is one atomic load
// per callback written and per frame accepted.
//
// Two kinds of events are recorded per bot, timed with Config.Now:
//   - "callback": a callback frame written to a connection (At is when its
//     WebSocket write began; one whose write failed is not kept), so it
//     always comes before the events of replies to it;
//   - "frame": a frame from the bot that was ACCEPTED (errcode 0) and shows
//     something to a user (aibot_respond_msg, aibot_respond_welcome_msg,
//     aibot_respond_update_msg, aibot_send_msg). At is when it was accepted,
//     just before its ack was queued.
//
// Rejected frames are not recorded (Stats counts them), but for one: a
// third kind, "dropped", is the reply the drop_on_reply fault cut off (At
// is when it came, the connection dropped; it was not applied), so a test
// can tell which of a message's frames the network took.

// Recorded event kinds.
const (
	RecordCallback = "callback"
	RecordFrame    = "frame"
	RecordDropped  = "dropped"
)

// RecordedEvent is one recorded event.
type RecordedEvent struct {
	Kind  string `json:"kind"` // RecordCallback or RecordFrame
	Cmd   string `json:"cmd"`
	ReqID string `json:"req_id"`
	Chat  string `json:"chat"`
	// MsgID is a callback's msgid.
	MsgID string `json:"msgid,omitempty"`
	// ReplyTo is the msgid of the callback a reply's req_id came with ("" for
	// proactive pushes).
	ReplyTo  string `json:"reply_to,omitempty"`
	StreamID string `json:"stream_id,omitempty"`
	Finish   bool   `json:"finish,omitempty"`
	// ContentLen and ContentHash describe the text shown (stream content,
	// markdown, welcome text, or a card's JSON): its length in bytes and the
	// first 8 bytes of its SHA-256 in hex (the same as task.Hash).
	ContentLen  int       `json:"content_len"`
	ContentHash string    `json:"content_hash,omitempty"`
	At          time.Time `json:"at"`
}

type recorder struct {
	on     atomic.Bool
	mu     sync.Mutex
	events map[string][]RecordedEvent // bot → events, in the order recorded
}

func (r *recorder) add(bot string, e RecordedEvent) {
	r.mu.Lock()
	if r.events == nil {
		r.events = make(map[string][]RecordedEvent)
	}
	r.events[bot] = append(r.events[bot], e)
	r.mu.Unlock()
}

// retract forgets the last event of bot equal to e (a callback whose
// write failed).
func (r *recorder) retract(bot string, e RecordedEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events[bot]
	for i := len(ev) - 1; i >= 0; i-- {
		if ev[i] == e {
			r.events[bot] = append(ev[:i:i], ev[i+1:]...)
			return
		}
	}
}

// StartRecording turns the recorder on (Config.Record turns it on from
// the start). Events recorded earlier are kept.
func (s *Server) StartRecording() { s.rec.on.Store(true) }

// StopRecording turns the recorder off; what was recorded is kept.
func (s *Server) StopRecording() { s.rec.on.Store(false) }

// Recording reports whether the recorder is on.
func (s *Server) Recording() bool { return s.rec.on.Load() }

// Recorded returns a copy of the events recorded for botID, in the order
// they were recorded (nil if none).
func (s *Server) Recorded(botID string) []RecordedEvent {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	ev := s.rec.events[botID]
	if len(ev) == 0 {
		return nil
	}
	return append([]RecordedEvent(nil), ev...)
}

// DrainRecorded returns the events recorded for botID and forgets them.
func (s *Server) DrainRecorded(botID string) []RecordedEvent {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	ev := s.rec.events[botID]
	delete(s.rec.events, botID)
	return ev
}

func contentHash(content string) string {
	h := sha256.Sum256([]byte(content))
	return hex.EncodeToString(h[:8])
}

// recordedCallback is the event to record when a callback frame is
// written, or nil when the recorder is off.
func (s *Server) recordedCallback(cmd, reqID string, p *pendingReq) *callbackRec {
	if !s.rec.on.Load() {
		return nil
	}
	return &callbackRec{ev: RecordedEvent{Kind: RecordCallback, Cmd: cmd, ReqID: reqID, Chat: p.chat, MsgID: p.msgid}}
}

// callbackRec rides on an outFrame: the writer records it once written.
type callbackRec struct {
	bot string
	ev  RecordedEvent
}

// recordFrame records an accepted frame of bot b. chat and replyTo come
// from the frame's req_id (replies) or body (pushes).
func (s *Server) recordFrame(botID string, f *wecom.Frame, chat, replyTo string, at time.Time) {
	s.recordFrameAs(RecordFrame, botID, f, chat, replyTo, at)
}

// recordFrameAs records frame f as an event of kind (RecordFrame or
// RecordDropped).
func (s *Server) recordFrameAs(kind, botID string, f *wecom.Frame, chat, replyTo string, at time.Time) {
	e := RecordedEvent{Kind: kind, Cmd: f.Cmd, ReqID: f.Headers.ReqID, Chat: chat, ReplyTo: replyTo, At: at}
	var content string
	switch f.Cmd {
	case wecom.CmdRespondMsg:
		var body wecom.RespondBody
		if json.Unmarshal(f.Body, &body) == nil {
			if body.Stream != nil {
				e.StreamID, e.Finish, content = body.Stream.ID, body.Stream.Finish, body.Stream.Content
			} else {
				content, e.Finish = cardJSON(body.TemplateCard), true
			}
		}
	case wecom.CmdRespondWelcomeMsg:
		var body wecom.WelcomeBody
		if json.Unmarshal(f.Body, &body) == nil {
			if body.Text != nil {
				content = body.Text.Content
			} else {
				content = cardJSON(body.TemplateCard)
			}
		}
		e.Finish = true
	case wecom.CmdRespondUpdateMsg:
		var body wecom.UpdateBody
		if json.Unmarshal(f.Body, &body) == nil {
			content = cardJSON(body.TemplateCard)
		}
		e.Finish = true
	case wecom.CmdSendMsg:
		var body wecom.SendMsgBody
		if json.Unmarshal(f.Body, &body) == nil {
			switch {
			case body.Markdown != nil:
				content = body.Markdown.Content
			case hasCard(body.TemplateCard):
				content = cardJSON(body.TemplateCard)
			}
		}
		e.Finish = true
	}
	e.ContentLen = len(content)
	if content != "" {
		e.ContentHash = contentHash(content)
	}
	s.rec.add(botID, e)
}

// replyRecorded records an accepted reply (its req_id names the chat and
// the callback). Call WITHOUT b.mu held.
func (c *conn) replyRecorded(b *bot, f *wecom.Frame, r result, now time.Time) {
	if r.code != 0 || r.dropped || !c.s.rec.on.Load() {
		return
	}
	var chat, replyTo string
	b.mu.Lock()
	if p := b.reqs[f.Headers.ReqID]; p != nil {
		chat, replyTo = p.chat, p.msgid
	}
	b.mu.Unlock()
	c.s.recordFrame(b.id, f, chat, replyTo, now)
}

// pushRecorded records an accepted aibot_send_msg.
func (c *conn) pushRecorded(b *bot, f *wecom.Frame, r result, now time.Time) {
	if r.code != 0 || r.dropped || !c.s.rec.on.Load() {
		return
	}
	var body struct {
		ChatID string `json:"chatid"`
	}
	_ = json.Unmarshal(f.Body, &body)
	c.s.recordFrame(b.id, f, body.ChatID, "", now)
}

// httpRecording serves GET /control/recording?bot_id=B[&drain=1].
func (s *Server) httpRecording(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if _, err := s.needBot(q.Get("bot_id")); err != nil {
		writeErr(w, err)
		return
	}
	var ev []RecordedEvent
	if d := q.Get("drain"); d == "1" || d == "true" {
		ev = s.DrainRecorded(q.Get("bot_id"))
	} else {
		ev = s.Recorded(q.Get("bot_id"))
	}
	if ev == nil {
		ev = []RecordedEvent{}
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"recording": s.Recording(), "events": ev})
}
