package backfill

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/mcpclient"
	"github.com/botctl/botctl/pkg/wecom"
)

// WeComHistory reads a bot's message history from WeCom itself: the "msg"
// MCP server that the bot's own long connection names (aibot_get_mcp_config
// with biz_type "msg", as the official OpenClaw plugin asks), whose
// get_msg_chat_list lists the chats with messages in a range and whose
// get_message reads one chat's messages, each paged by cursor.
//
// It relies on the history covering the bot's own conversations (every
// message users sent the bot). Where it does not (the bot's msg
// capability is not authorized, or the server covers only an authorizing
// member's chats, or the gap is older than the 7 days the history keeps),
// History fails with an error that matches ErrNoHistory and says which
// (ErrNotAuthorized, ErrNotCovered): the gap is marked and paged as
// without a history source.
//
// Only text messages are read: the history gives the content of no other.
// The history gives no msgid: a message's id is derived from what it says
// (HistoryMsgID), the same on every read, so the passes of every node
// dedupe it as they dedupe msgids.
type WeComHistory struct {
	Client *http.Client // nil: a client with a 30 s timeout
	// MaxBytes bounds one response's body. Default DefaultHistoryMaxBytes.
	MaxBytes int64
	// Clock is what the 7-day limit is measured from; nil: clock.Real.
	Clock clock.PassiveClock

	mu    sync.Mutex
	conns map[string]Conn   // bot → the connection this node holds
	urls  map[string]string // bot → its msg server's URL, asked on conns[bot]
	mcpc  *mcpclient.Client // made on first use, of Client and MaxBytes
}

// Conn is a bot's long connection as WeComHistory asks through it
// (*wecom.Conn).
type Conn interface {
	Do(ctx context.Context, cmd, reqID string, body any) (*wecom.Frame, error)
}

// CmdGetMCPConfig asks for a business type's MCP server over the bot's
// connection.
const CmdGetMCPConfig = "aibot_get_mcp_config"

// ErrNotAuthorized: the bot's "msg" capability (reading message history)
// is not authorized, or its authorization expired (errcode 850001 or
// 851014). It matches ErrNoHistory.
var ErrNotAuthorized = errors.New("the bot is not authorized to read WeCom's message history")

// ErrNotCovered: WeCom's history does not cover the gap (older than its
// 7 days, or a history of an authorizing member's chats only). It
// matches ErrNoHistory.
var ErrNotCovered = errors.New("WeCom's message history does not cover the gap")

// unavailable is a history that cannot give a gap's messages: it matches
// ErrNoHistory and its kind.
type unavailable struct {
	kind error
	why  string
}

func (e *unavailable) Error() string { return e.kind.Error() + ": " + e.why }
func (e *unavailable) Is(target error) bool {
	return target == ErrNoHistory || target == e.kind
}

// WeCom's errcodes of the msg server's results (the official plugin's
// BIZ_CACHE_CLEAR_ERROR_CODES): the bot's authorization expired, or was
// reset.
const (
	errCodeMCPUnauthorized = 850001
	errCodeMCPAuthReset    = 851014
)

// historyDays is how far back get_message reads.
const historyDays = 7

// historyLayout and historyZone are the msg tools' times: to the second,
// Beijing time.
const historyLayout = "2006-01-02 15:04:05"

var historyZone = time.FixedZone("CST", 8*3600)

// maxHistoryPages bounds the pages one read follows.
const maxHistoryPages = 1000

// Connected tells w which connection this node holds for bot; the msg
// server's URL is asked on it again.
func (w *WeComHistory) Connected(bot string, c Conn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conns == nil {
		w.conns, w.urls = map[string]Conn{}, map[string]string{}
	}
	w.conns[bot] = c
	delete(w.urls, bot)
}

// Disconnected forgets bot's connection c (not a newer one).
func (w *WeComHistory) Disconnected(bot string, c Conn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conns[bot] == c {
		delete(w.conns, bot)
		delete(w.urls, bot)
	}
}

// historyIDPrefix starts every HistoryMsgID.
const historyIDPrefix = "wecomhist-"

// HistoryMsgID is the id of a message read from WeCom's history, which
// gives none: the bot, the chat, the sender, the second it was sent, its
// type and its text. Two messages alike in all of these are one.
func HistoryMsgID(bot, chatType, chat, user string, sent time.Time, msgType, text string) string {
	h := sha256.New()
	for _, s := range []string{bot, chatType, chat, user, strconv.FormatInt(sent.Unix(), 10), msgType, text} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return historyIDPrefix + hex.EncodeToString(h.Sum(nil)[:16])
}

// HistoryID is the id WeCom's message history gives m (HistoryMsgID):
// m's own id when it was read from that history, else the id derived from
// its chat, sender, second and text; "" for a message without text or
// create time (the history gives no text of the others). Every source of
// one message agrees on it, so a message answered from one source, or
// live, is known when another source gives it again.
func (m Message) HistoryID(bot string) string {
	if strings.HasPrefix(m.MsgID, historyIDPrefix) {
		return m.MsgID
	}
	if m.Text == "" || m.Created.IsZero() {
		return ""
	}
	chat, chatType := m.Chat, wecom.ChatSingle
	if m.ChatType == wecom.ChatGroup {
		chatType = wecom.ChatGroup
	} else if chat == "" {
		chat = m.UserID
	}
	return HistoryMsgID(bot, chatType, chat, m.UserID, m.Created, wecom.MsgTypeText, m.Text)
}

// History implements HistorySource: the chats with messages in [since,
// until), then each one's messages, every page of each.
func (w *WeComHistory) History(ctx context.Context, bot string, since, until time.Time) ([]Message, error) {
	var now clock.PassiveClock = clock.Real
	if w.Clock != nil {
		now = w.Clock
	}
	if since.Before(now.Now().Add(-historyDays * 24 * time.Hour)) {
		return nil, &unavailable{ErrNotCovered, fmt.Sprintf("the gap starts at %s, more than %d days ago; the history keeps %d days",
			since.UTC().Format(time.RFC3339), historyDays, historyDays)}
	}
	begin := since.In(historyZone).Format(historyLayout)
	end := until.Add(-time.Nanosecond).In(historyZone).Format(historyLayout)
	var chats []struct {
		ChatID   string `json:"chat_id"`
		MsgCount int    `json:"msg_count"`
	}
	err := w.pages(ctx, bot, "get_msg_chat_list", map[string]any{"begin_time": begin, "end_time": end}, func(raw json.RawMessage) error {
		var page struct {
			Chats []struct {
				ChatID   string `json:"chat_id"`
				MsgCount int    `json:"msg_count"`
			} `json:"chats"`
		}
		err := json.Unmarshal(raw, &page)
		chats = append(chats, page.Chats...)
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []Message
	for _, c := range chats {
		// The chat list does not say a chat's type: a single chat's id is
		// the user's; a chat with messages that has none as a single chat
		// is a group.
		msgs, err := w.chat(ctx, bot, wecom.ChatTypeSingle, c.ChatID, begin, end)
		if err == nil && len(msgs) == 0 && c.MsgCount > 0 {
			msgs, err = w.chat(ctx, bot, wecom.ChatTypeGroup, c.ChatID, begin, end)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, msgs...)
	}
	return out, nil
}

// chat reads one chat's messages in [begin, end].
func (w *WeComHistory) chat(ctx context.Context, bot string, chatType int, chatID, begin, end string) ([]Message, error) {
	typ := map[int]string{wecom.ChatTypeSingle: wecom.ChatSingle, wecom.ChatTypeGroup: wecom.ChatGroup}[chatType]
	var out []Message
	args := map[string]any{"chat_type": chatType, "chatid": chatID, "begin_time": begin, "end_time": end}
	err := w.pages(ctx, bot, "get_message", args, func(raw json.RawMessage) error {
		var page struct {
			Messages []struct {
				UserID   string `json:"userid"`
				SendTime string `json:"send_time"`
				MsgType  string `json:"msgtype"`
				Text     struct {
					Content string `json:"content"`
				} `json:"text"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return err
		}
		for _, m := range page.Messages {
			if m.MsgType != wecom.MsgTypeText {
				// The history gives no content of the others: nothing
				// to answer late, and no id the inbound path marked
				// (a delivered image would count as missed).
				continue
			}
			sent, err := time.ParseInLocation(historyLayout, m.SendTime, historyZone)
			if err != nil {
				return fmt.Errorf("message of chat %s: send_time %q: %w", chatID, m.SendTime, err)
			}
			out = append(out, Message{MsgID: HistoryMsgID(bot, typ, chatID, m.UserID, sent, m.MsgType, m.Text.Content),
				Chat: chatID, ChatType: typ, UserID: m.UserID, Text: m.Text.Content, Created: sent.UTC()})
		}
		return nil
	})
	return out, err
}

// pages calls tool with args and each next_cursor until the last page,
// handing every page's result to each.
func (w *WeComHistory) pages(ctx context.Context, bot, tool string, args map[string]any, each func(json.RawMessage) error) error {
	seen := map[string]bool{}
	for range maxHistoryPages {
		raw, err := w.call(ctx, bot, tool, args)
		if err != nil {
			return err
		}
		if err := each(raw); err != nil {
			return fmt.Errorf("%s of bot %s: %w", tool, bot, err)
		}
		var next struct {
			NextCursor string `json:"next_cursor"`
		}
		_ = json.Unmarshal(raw, &next)
		if next.NextCursor == "" {
			return nil
		}
		if seen[next.NextCursor] {
			return fmt.Errorf("%s of bot %s: cursor %q given twice", tool, bot, next.NextCursor)
		}
		seen[next.NextCursor] = true
		args["cursor"] = next.NextCursor
	}
	return fmt.Errorf("%s of bot %s: more than %d pages", tool, bot, maxHistoryPages)
}

// call calls a tool of bot's msg server and returns its business result,
// errcode 0; a session the server forgot (404) is begun again once.
func (w *WeComHistory) call(ctx context.Context, bot, tool string, args map[string]any) (json.RawMessage, error) {
	url, err := w.url(ctx, bot)
	if err != nil {
		return nil, err
	}
	var result struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	mcpc, limit := w.client()
	raw, err := mcpc.Call(ctx, url, "", "tools/call", map[string]any{"name": tool, "arguments": args})
	if errors.Is(err, mcpclient.ErrTooLarge) {
		err = fmt.Errorf("%w: more than %d bytes in one page", ErrHistoryTooLarge, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("%s of bot %s: %w", tool, bot, err)
	}
	if err := json.Unmarshal(raw, &result); err != nil {
		return nil, fmt.Errorf("%s of bot %s: the result is not a tool's: %w", tool, bot, err)
	}
	for _, c := range result.Content {
		if c.Type != "text" {
			continue
		}
		var biz struct {
			ErrCode int    `json:"errcode"`
			ErrMsg  string `json:"errmsg"`
		}
		if err := json.Unmarshal([]byte(c.Text), &biz); err != nil {
			return nil, fmt.Errorf("%s of bot %s: result is not JSON: %w", tool, bot, err)
		}
		return json.RawMessage(c.Text), w.bizError(bot, tool, biz.ErrCode, biz.ErrMsg)
	}
	return nil, fmt.Errorf("%s of bot %s: a result without text content", tool, bot)
}

// bizError classifies a tool's errcode: the authorization's (the URL is
// asked again next time, as the plugin does), a transient one (retried by
// the pass), or any other refusal, which says the history does not cover
// this read.
func (w *WeComHistory) bizError(bot, tool string, code int, msg string) error {
	switch code {
	case wecom.ErrCodeOK:
		return nil
	case errCodeMCPUnauthorized, errCodeMCPAuthReset:
		w.mu.Lock()
		delete(w.urls, bot)
		w.mu.Unlock()
		return &unavailable{ErrNotAuthorized, fmt.Sprintf("%s of bot %s: errcode %d: %s (an admin authorizes the bot's msg capability in WeCom)", tool, bot, code, msg)}
	case wecom.ErrCodeSystemBusy, wecom.ErrCodeCommandConflict, wecom.ErrCodeRateLimited:
		return fmt.Errorf("%s of bot %s: errcode %d: %s", tool, bot, code, msg)
	}
	return &unavailable{ErrNotCovered, fmt.Sprintf("%s of bot %s refused: errcode %d: %s", tool, bot, code, msg)}
}

// url is bot's msg server's URL, asked on its connection once per
// connection.
func (w *WeComHistory) url(ctx context.Context, bot string) (string, error) {
	w.mu.Lock()
	c, url := w.conns[bot], w.urls[bot]
	w.mu.Unlock()
	if url != "" {
		return url, nil
	}
	if c == nil {
		return "", fmt.Errorf("bot %s: no connection on this node to ask for its message history's server", bot)
	}
	f, err := c.Do(ctx, CmdGetMCPConfig, wecom.NewReqID("mcp_config"), map[string]string{"biz_type": "msg"})
	if err != nil {
		code := wecom.ErrCodeOf(err)
		if code > 0 && !wecom.IsConnectionError(err) && code != wecom.ErrCodeRateLimited && code != wecom.ErrCodeCommandConflict {
			return "", &unavailable{ErrNotAuthorized, fmt.Sprintf("%s (biz_type msg) of bot %s refused: %v", CmdGetMCPConfig, bot, err)}
		}
		return "", fmt.Errorf("%s of bot %s: %w", CmdGetMCPConfig, bot, err)
	}
	var body struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(f.Body, &body); err != nil || body.URL == "" {
		return "", fmt.Errorf("%s of bot %s: the answer has no url", CmdGetMCPConfig, bot)
	}
	w.mu.Lock()
	if w.conns[bot] == c {
		w.urls[bot] = body.URL
	}
	w.mu.Unlock()
	return body.URL, nil
}

// client is w's MCP client and the bound of one answer, made on first
// use.
func (w *WeComHistory) client() (*mcpclient.Client, int64) {
	limit := w.MaxBytes
	if limit <= 0 {
		limit = DefaultHistoryMaxBytes
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mcpc == nil {
		w.mcpc = mcpclient.New(mcpclient.Options{HTTP: w.Client, MaxBytes: limit, Server: "the message history's server"})
	}
	return w.mcpc, limit
}
