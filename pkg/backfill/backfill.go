// Package backfill finds the user messages a bot missed and answers them.
//
// WeCom delivers a callback once, to the connection that holds the bot at
// that moment, and never again. A message sent while no node held the
// connection (a handover, an outage), one read by a leader that died
// before it was recorded, or one that existed only in the spool of a node
// that is gone, would be lost without a trace. Two things close that:
//
//   - the inbound Watermark: per bot, the create time of the latest message
//     the inbound path handled to the end (recorded in JetStream), written
//     every few seconds and never while the node's spool holds a task (a
//     spooled message is not durable in the cluster yet). During a
//     JetStream outage it cannot be written at all, so it stays before the
//     outage;
//   - a pass at the start of every term (Run): the bot's history from the
//     watermark less Overlap up to the term's start is read from a
//     HistorySource; every message without a task record (the record is
//     the proof it was handled) is handed to the inbound path as a late
//     message, answered by proactive push with a note that it is late. The
//     task id is derived from the msgid, so a message found twice, or also
//     delivered by WeCom, is one task.
//
// What is not covered: WeCom's public API has no message history for AI
// bots (assumed); without a HistorySource (the simulator's history API is
// the one implementation) no pass runs, and the log says so once per term
// (pkg/health then marks the conversations active around an outage's gap
// "may be incomplete" and, for an outage, pages a person). A pass is
// bounded by MaxMessages; what is beyond it, or refused, is reported as not
// filled (Report.Unfilled): pkg/health marks those conversations "may be
// incomplete", the next answer there tells the user, and a data incident
// pages a person. A message whose conversation is busy is deferred
// (ErrBusy) to a later pass, not counted as not filled.
package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/redact"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"
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
}

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
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("read history of bot %s: %w", bot, err)
	}
	out := make([]Message, 0, len(body.Messages))
	for _, m := range body.Messages {
		out = append(out, Message{MsgID: m.MsgID, Chat: m.Chat, ChatType: m.ChatType, UserID: m.UserID, Text: m.Text, Created: time.Unix(m.CreateTime, 0).UTC()})
	}
	return out, nil
}

// Watermark is a bot's inbound watermark as stored.
type Watermark struct {
	Created time.Time `json:"created"` // create time of the latest message handled to the end
	Node    string    `json:"node"`
	Updated time.Time `json:"updated"`
}

func watermarkKey(bot string) string { return jetstream.BotKey(bot) + ".inbound" }

// LoadWatermark reads bot's inbound watermark; zero when there is none.
func LoadWatermark(ctx context.Context, store *jetstream.Store, bot string) (Watermark, error) {
	e, err := store.Watermarks().Get(ctx, watermarkKey(bot))
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return Watermark{}, nil
	}
	if err != nil {
		return Watermark{}, fmt.Errorf("inbound watermark of bot %s: %w", bot, err)
	}
	var w Watermark
	if err := json.Unmarshal(e.Value(), &w); err != nil {
		return Watermark{}, fmt.Errorf("inbound watermark of bot %s: %w", bot, err)
	}
	return w, nil
}

// Tracker keeps the inbound watermarks of a node's bots and writes them
// (Run): Handled moves a bot's mark forward in memory; a write happens
// every interval, only forward, and never while Holding reports true (a
// task is only in the local spool).
type Tracker struct {
	Store   *jetstream.Store
	Node    string
	Holding func() bool // nil: never
	Logger  zerolog.Logger

	mu      sync.Mutex
	pending map[string]time.Time // bot → latest handled, not yet written
}

// Handled records that a message of bot created at created was handled
// to the end (its task is recorded in JetStream, or it needed none).
func (t *Tracker) Handled(bot string, created time.Time) {
	if created.IsZero() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending == nil {
		t.pending = map[string]time.Time{}
	}
	if created.After(t.pending[bot]) {
		t.pending[bot] = created
	}
}

// Run writes the watermarks every interval until ctx ends, and once more
// then.
func (t *Tracker) Run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			t.flush(fctx)
			cancel()
			return
		case <-tick.C:
			t.flush(ctx)
		}
	}
}

func (t *Tracker) flush(ctx context.Context) {
	if t.Holding != nil && t.Holding() {
		return // a spooled message must not fall behind the watermark
	}
	t.mu.Lock()
	pending := t.pending
	t.pending = nil
	t.mu.Unlock()
	for bot, created := range pending {
		if err := t.advance(ctx, bot, created); err != nil {
			t.Logger.Debug().Err(err).Str("bot", bot).Msg("inbound watermark not written; retrying")
			t.Handled(bot, created) // keep it for the next round
		}
	}
}

// advance writes bot's watermark if created is past the stored one.
func (t *Tracker) advance(ctx context.Context, bot string, created time.Time) error {
	kv := t.Store.Watermarks()
	for try := range 10 {
		jetstream.CASPause(ctx, try)
		e, err := kv.Get(ctx, watermarkKey(bot))
		var rev uint64
		switch {
		case errors.Is(err, natsjs.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			var cur Watermark
			if json.Unmarshal(e.Value(), &cur) == nil && !created.After(cur.Created) {
				return nil
			}
			rev = e.Revision()
		}
		raw, _ := json.Marshal(Watermark{Created: created, Node: t.Node, Updated: time.Now().UTC()})
		if rev == 0 {
			_, err = kv.Create(ctx, watermarkKey(bot), raw)
		} else {
			_, err = kv.Update(ctx, watermarkKey(bot), raw, rev)
		}
		if err == nil || !jetstream.LostCAS(err) {
			return err
		}
	}
	return fmt.Errorf("inbound watermark of bot %s: too many concurrent writers", bot)
}

// Config shapes a pass.
type Config struct {
	Store   *jetstream.Store
	Source  HistorySource
	Overlap time.Duration // read this much before the watermark (and for the first pass ever, before the term). Default 60s.
	// MaxMessages bounds the messages a pass hands over. Default 500.
	MaxMessages int
	// Rate bounds how fast a pass hands messages over (per second).
	// Default 20.
	Rate float64
	// Known reports whether a message was handled already (its task
	// record exists).
	Known func(ctx context.Context, bot, msgid string) (bool, error)
	// Late hands a missed message to the inbound path, to be answered by
	// push with a note that it is late.
	Late   func(ctx context.Context, bot string, m Message) error
	Logger zerolog.Logger
}

// ErrBusy, returned by Late, says the missed message's conversation has a
// task now: the message is deferred, and a later pass over the same range
// hands it over once the conversation is free (as if the user had asked
// again), instead of refusing it as busy long after the fact.
var ErrBusy = errors.New("backfill: conversation busy")

// Report is what one pass did.
type Report struct {
	Bot       string    `json:"bot"`
	Since     time.Time `json:"since"`
	Until     time.Time `json:"until"`
	Read      int       `json:"read"`       // messages in the range
	Known     int       `json:"known"`      // already handled
	Filled    int       `json:"filled"`     // missed, handed over now
	Deferred  int       `json:"deferred"`   // missed, conversation busy: for a later pass
	NotFilled int       `json:"not_filled"` // missed, beyond MaxMessages or refused
	// Unfilled are the conversations of the messages not filled: they
	// may be incomplete.
	Unfilled []string      `json:"unfilled,omitempty"`
	Took     time.Duration `json:"took"`
}

func (r *Report) unfilled(chat string) {
	r.NotFilled++
	for _, c := range r.Unfilled {
		if c == chat {
			return
		}
	}
	r.Unfilled = append(r.Unfilled, chat)
}

// Since is where a pass for bot up to until starts: its watermark less
// the overlap (until less the overlap when it has none yet). Later passes
// over the same gap keep it, although the watermark moves on.
func Since(ctx context.Context, cfg Config, bot string, until time.Time) (time.Time, error) {
	if cfg.Overlap <= 0 {
		cfg.Overlap = time.Minute
	}
	wm, err := LoadWatermark(ctx, cfg.Store, bot)
	if err != nil {
		return time.Time{}, err
	}
	if wm.Created.IsZero() {
		return until.Add(-cfg.Overlap), nil
	}
	return wm.Created.Add(-cfg.Overlap), nil
}

// Run reads bot's history in [since, until) and hands every message not
// handled yet to Late.
func Run(ctx context.Context, cfg Config, bot string, since, until time.Time) (Report, error) {
	if cfg.MaxMessages <= 0 {
		cfg.MaxMessages = 500
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 20
	}
	limit := rate.NewLimiter(rate.Limit(cfg.Rate), 1)
	start := time.Now()
	rep := Report{Bot: bot, Since: since, Until: until}
	msgs, err := cfg.Source.History(ctx, bot, rep.Since, until)
	if err != nil {
		return rep, err
	}
	rep.Read = len(msgs)
	for _, m := range msgs {
		known, err := cfg.Known(ctx, bot, m.MsgID)
		if err != nil {
			return rep, err
		}
		if known {
			rep.Known++
			continue
		}
		if rep.Filled >= cfg.MaxMessages {
			rep.unfilled(m.Chat)
			continue
		}
		if err := limit.Wait(ctx); err != nil {
			return rep, err
		}
		if err := cfg.Late(ctx, bot, m); errors.Is(err, ErrBusy) {
			rep.Deferred++
			continue
		} else if err != nil {
			rep.unfilled(m.Chat)
			cfg.Logger.Warn().Err(err).Str("bot", bot).Str("msgid", m.MsgID).Msg("missed message not filled")
			continue
		}
		rep.Filled++
	}
	rep.Took = time.Since(start)
	if rep.NotFilled > 0 {
		cfg.Logger.Error().Str("bot", bot).Int("not_filled", rep.NotFilled).Msg("backfill incomplete: some missed messages were not answered")
	}
	return rep, nil
}
