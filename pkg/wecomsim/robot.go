package wecomsim

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/botctl/botctl/internal/httpjson"
)

// The group robot: WeCom's incoming webhook for group chats
// (POST /cgi-bin/webhook/send?key=KEY with {"msgtype":"markdown",
// "markdown":{"content":…}}), where botctl's alerts go. The simulator plays
// it so that the demo, tests and drills see every alert arrive, and keeps
// WeCom's limit: 20 messages a minute per robot (errcode 45009 past it),
// content at most 4096 bytes (40058).

// RobotMessage is one message a group robot received.
type RobotMessage struct {
	Key     string    `json:"key"`
	MsgType string    `json:"msgtype"`
	Content string    `json:"content"`
	At      time.Time `json:"at"`
}

// Robot limits (WeCom's documented ones for group robots).
const (
	RobotRatePerMinute  = 20
	RobotMaxContent     = 4096
	ErrCodeRobotTooLong = 40058
)

type robots struct {
	mu   sync.Mutex
	msgs []RobotMessage
	sent map[string][]time.Time // key → sends in the last minute
}

func (s *Server) httpRobotSend(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" {
		httpjson.Write(w, http.StatusOK, map[string]any{"errcode": 93000, "errmsg": "invalid webhook url: key missing"})
		return
	}
	var body struct {
		MsgType  string `json:"msgtype"`
		Markdown struct {
			Content string `json:"content"`
		} `json:"markdown"`
		Text struct {
			Content string `json:"content"`
		} `json:"text"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBody)).Decode(&body); err != nil {
		httpjson.Write(w, http.StatusOK, map[string]any{"errcode": 40008, "errmsg": "invalid message type: body is not JSON"})
		return
	}
	content := body.Markdown.Content
	if body.MsgType == "text" {
		content = body.Text.Content
	}
	if body.MsgType != "markdown" && body.MsgType != "text" {
		httpjson.Write(w, http.StatusOK, map[string]any{"errcode": 40008, "errmsg": "invalid message type: want markdown or text"})
		return
	}
	if len(content) > RobotMaxContent {
		httpjson.Write(w, http.StatusOK, map[string]any{"errcode": ErrCodeRobotTooLong, "errmsg": "content exceeds 4096 bytes"})
		return
	}
	now := s.now()
	rb := &s.robot
	rb.mu.Lock()
	if rb.sent == nil {
		rb.sent = map[string][]time.Time{}
	}
	recent := rb.sent[key][:0:0]
	for _, t := range rb.sent[key] {
		if now.Sub(t) < time.Minute {
			recent = append(recent, t)
		}
	}
	if len(recent) >= RobotRatePerMinute {
		rb.sent[key] = recent
		rb.mu.Unlock()
		httpjson.Write(w, http.StatusOK, map[string]any{"errcode": 45009, "errmsg": "api freq out of limit: 20 messages a minute per robot"})
		return
	}
	rb.sent[key] = append(recent, now)
	rb.msgs = append(rb.msgs, RobotMessage{Key: key, MsgType: body.MsgType, Content: content, At: now.UTC()})
	rb.mu.Unlock()
	httpjson.Write(w, http.StatusOK, map[string]any{"errcode": 0, "errmsg": "ok"})
}

// RobotMessages returns what the group robot of key received ("" every robot).
func (s *Server) RobotMessages(key string) []RobotMessage {
	s.robot.mu.Lock()
	defer s.robot.mu.Unlock()
	out := []RobotMessage{}
	for _, m := range s.robot.msgs {
		if key == "" || m.Key == key {
			out = append(out, m)
		}
	}
	return out
}

func (s *Server) httpRobotMessages(w http.ResponseWriter, r *http.Request) {
	httpjson.Write(w, http.StatusOK, map[string]any{"messages": s.RobotMessages(r.URL.Query().Get("key"))})
}
