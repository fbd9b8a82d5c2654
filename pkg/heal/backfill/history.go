package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/redact"
)

// Message is a user message as a history source gives it.
type Message struct {
	MsgID    string    `json:"msgid"`
	Chat     string    `json:"chat"`
	ChatType string    `json:"chat_type"`
	UserID   string    `json:"user_id"`
	Text     string    `json:"text"`
	Created  time.Time `json:"created"`
}

// HistorySource reads a bot's user messages created in [since, until).
type HistorySource interface {
	History(ctx context.Context, bot string, since, until time.Time) ([]Message, error)
}

// SimHistory reads the WeCom simulator's history API
// (GET <base>/control/history).
type SimHistory struct {
	Base   string // e.g. http://127.0.0.1:8390
	Client *http.Client
	// MaxBytes bounds the body of one history response: a source that
	// sends more (a gap of days read at once, a misbehaving server) fails
	// the read with ErrHistoryTooLarge instead of filling the node's
	// memory. Default DefaultHistoryMaxBytes.
	MaxBytes int64
}

// DefaultHistoryMaxBytes is SimHistory.MaxBytes' default, 16 MiB: about
// 2,000 messages of access.max_question_bytes' default (8,000 bytes) with
// their JSON, four times a pass's default budget (backfill.max_messages,
// 500), and far more of everyday length; an audit, every minute, reads a
// minute's messages.
const DefaultHistoryMaxBytes = 16 << 20

// ErrHistoryTooLarge: a history response was larger than the reader's
// bound (SimHistory.MaxBytes); nothing of it is used.
var ErrHistoryTooLarge = errors.New("history response too large")

// SimHistoryFor derives the simulator's control base URL from its
// WebSocket URL (ws://host:port/ → http://host:port).
func SimHistoryFor(wsURL string) (*SimHistory, error) {
	u, err := url.Parse(wsURL)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return nil, fmt.Errorf("backfill: %q is not a ws:// or wss:// URL", redact.URL(wsURL))
	}
	scheme := "http"
	if u.Scheme == "wss" {
		scheme = "https"
	}
	return &SimHistory{Base: scheme + "://" + u.Host}, nil
}

// History implements HistorySource.
func (s *SimHistory) History(ctx context.Context, bot string, since, until time.Time) ([]Message, error) {
	// The API takes whole seconds (create times are unix seconds): widen
	// the range to them rather than lose the last second.
	since, until = since.Truncate(time.Second), until.Truncate(time.Second).Add(time.Second)
	q := url.Values{"bot_id": {bot}, "since": {since.UTC().Format(time.RFC3339)}, "until": {until.UTC().Format(time.RFC3339)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(s.Base, "/")+"/control/history?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	client := s.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, redact.Error(fmt.Errorf("read history of bot %s: %w", bot, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read history of bot %s: %s", bot, resp.Status)
	}
	var body struct {
		Messages []struct {
			MsgID      string `json:"msgid"`
			Chat       string `json:"chat"`
			ChatType   string `json:"chat_type"`
			UserID     string `json:"user_id"`
			Text       string `json:"text"`
			CreateTime int64  `json:"create_time"`
		} `json:"messages"`
	}
	limit := s.MaxBytes
	if limit <= 0 {
		limit = DefaultHistoryMaxBytes
	}
	// One byte past the bound tells a body that is too large from one
	// that fits exactly.
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, redact.Error(fmt.Errorf("read history of bot %s: %w", bot, err))
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("read history of bot %s from %s to %s: %w: more than %d bytes; the range holds more messages than one read takes (a shorter gap, or a larger SimHistory.MaxBytes)",
			bot, since.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339), ErrHistoryTooLarge, limit)
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, fmt.Errorf("read history of bot %s: %w", bot, err)
	}
	out := make([]Message, 0, len(body.Messages))
	for _, m := range body.Messages {
		out = append(out, Message{MsgID: m.MsgID, Chat: m.Chat, ChatType: m.ChatType, UserID: m.UserID, Text: m.Text, Created: time.Unix(m.CreateTime, 0).UTC()})
	}
	return out, nil
}
