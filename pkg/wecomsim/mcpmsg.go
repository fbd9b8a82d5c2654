package wecomsim

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
)

// The "msg" business type: WeCom's message history and sends as the
// official plugin's wecom-msg skill documents them
// (references/api-get-msg-chat-list.md, api-get-messages.md and
// api-send-message.md): send_message sends a text to a chat as the bot
// (one the bot's users talked in, under the chat's send quota);
// get_msg_chat_list lists the chats with
// messages between two times, get_message reads one chat's messages, each
// paged by an opaque cursor. Times are "YYYY-MM-DD HH:mm:ss", Beijing
// time, to the second, both ends included; begin_time no earlier than 7
// days before now. Messages carry no msgid (the documented fields are
// userid, send_time, msgtype and the type's object). The history is the
// simulator's own: every message posted to the bot (PostMessage), as its
// authorization's scope lets the caller see it (MCPAccess).

// MCPTimeLayout is the layout of the msg tools' times, in MCPTimeZone.
const MCPTimeLayout = "2006-01-02 15:04:05"

// MCPTimeZone is Beijing time, the zone of the msg tools' times.
var MCPTimeZone = time.FixedZone("CST", 8*3600)

// MCPHistoryDays is how far back get_message reads.
const MCPHistoryDays = 7

// mcpPageSize is how many chats or messages one page holds.
const mcpPageSize = 2

var msgTools = map[string]mcpTool{
	"get_msg_chat_list": {
		description: "按时间范围查询有消息的会话列表，支持分页",
		inputSchema: map[string]any{"type": "object", "required": []string{"begin_time", "end_time"}, "properties": map[string]any{
			"begin_time": map[string]any{"type": "string"}, "end_time": map[string]any{"type": "string"}, "cursor": map[string]any{"type": "string"}}},
		handler: chatListTool{},
	},
	"get_message": {
		description: "根据会话类型和 ID 拉取指定时间范围内的消息记录，支持分页",
		inputSchema: map[string]any{"type": "object", "required": []string{"chat_type", "chatid", "begin_time", "end_time"}, "properties": map[string]any{
			"chat_type": map[string]any{"type": "integer"}, "chatid": map[string]any{"type": "string"},
			"begin_time": map[string]any{"type": "string"}, "end_time": map[string]any{"type": "string"}, "cursor": map[string]any{"type": "string"}}},
		handler: getMessageTool{},
	},
	"send_message": {
		description: "向单聊或群聊发送文本消息",
		inputSchema: map[string]any{"type": "object", "required": []string{"chat_type", "chatid", "msgtype", "text"}, "properties": map[string]any{
			"chat_type": map[string]any{"type": "integer"}, "chatid": map[string]any{"type": "string"}, "msgtype": map[string]any{"type": "string", "enum": []string{"text"}},
			"text": map[string]any{"type": "object", "required": []string{"content"}, "properties": map[string]any{"content": map[string]any{"type": "string"}}}}},
		handler: sendMessageTool{},
	},
}

// MCPMaxSendBytes bounds send_message's text.content.
const MCPMaxSendBytes = 2048

// msgRange is the time range and cursor every msg tool takes.
type msgRange struct {
	BeginTime string `json:"begin_time"`
	EndTime   string `json:"end_time"`
	Cursor    string `json:"cursor"`
	ChatType  int    `json:"chat_type"`
	ChatID    string `json:"chatid"`
}

func bizInvalid(msg string) error { return &mcpBizError{code: wecom.ErrCodeInvalidParam, msg: msg} }

// parse checks the arguments: the range's times (the seconds given, both
// included: [begin, end+1s)) and the cursor's offset.
func (q *msgRange) parse(now time.Time) (from, to time.Time, offset int, err error) {
	from, err1 := time.ParseInLocation(MCPTimeLayout, q.BeginTime, MCPTimeZone)
	to, err2 := time.ParseInLocation(MCPTimeLayout, q.EndTime, MCPTimeZone)
	switch {
	case err1 != nil || err2 != nil:
		return from, to, 0, bizInvalid("begin_time and end_time are required, as YYYY-MM-DD HH:mm:ss")
	case to.Before(from):
		return from, to, 0, bizInvalid("end_time must not be before begin_time")
	case from.Before(now.Add(-MCPHistoryDays * 24 * time.Hour)):
		return from, to, 0, bizInvalid("begin_time is more than 7 days ago: only the last 7 days can be read")
	}
	if q.Cursor != "" {
		if offset, err = strconv.Atoi(q.Cursor); err != nil || offset < 0 {
			return from, to, 0, bizInvalid("cursor " + quote(q.Cursor) + " is not one this server gave")
		}
	}
	return from, to.Add(time.Second), offset, nil
}

// visibleMsg is a message of the history with its type.
type visibleMsg struct {
	HistoryMessage
	msgType string
}

// visible is the caller's view of the bot's history under its
// authorization: the messages of [from, to) it may read, oldest first.
func (s *Server) visible(cc mcpCall, from, to time.Time) ([]visibleMsg, error) {
	acc, err := s.authorize(cc)
	if err != nil {
		return nil, err
	}
	b, err := s.bot(cc.bot)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// A member sees their single chat and the groups they spoke in.
	groups := map[string]bool{}
	if acc.Scope == MCPScopeMember {
		for _, m := range b.messages {
			if m.UserID == cc.requester && m.ChatType == wecom.ChatGroup {
				groups[m.Chat] = true
			}
		}
	}
	var out []visibleMsg
	for _, m := range b.messages {
		if m.at.Before(from) || !m.at.Before(to) {
			continue
		}
		if acc.Scope == MCPScopeMember && !(m.ChatType == wecom.ChatSingle && m.UserID == cc.requester) && !groups[m.Chat] {
			continue
		}
		v := visibleMsg{HistoryMessage: m.HistoryMessage, msgType: m.msgType}
		v.CreateTime = m.at.Unix()
		if v.msgType == "" {
			v.msgType = wecom.MsgTypeText
		}
		out = append(out, v)
	}
	return out, nil
}

// chatListTool is get_msg_chat_list.
type chatListTool struct{}

func (chatListTool) call(s *Server, cc mcpCall, raw json.RawMessage) (any, error) {
	var q msgRange
	if err := json.Unmarshal(raw, &q); err != nil {
		return nil, bizInvalid("arguments must be {\"begin_time\":…,\"end_time\":…,\"cursor\":…}")
	}
	from, to, offset, err := q.parse(s.now())
	if err != nil {
		return nil, err
	}
	msgs, err := s.visible(cc, from, to)
	if err != nil {
		return nil, err
	}
	type chat struct {
		ChatID      string `json:"chat_id"`
		ChatName    string `json:"chat_name"`
		LastMsgTime string `json:"last_msg_time"`
		MsgCount    int    `json:"msg_count"`
	}
	var chats []*chat
	byID := map[string]*chat{}
	for _, m := range msgs {
		c := byID[m.Chat]
		if c == nil {
			c = &chat{ChatID: m.Chat, ChatName: m.Chat}
			byID[m.Chat] = c
			chats = append(chats, c)
		}
		c.MsgCount++
		c.LastMsgTime = time.Unix(m.CreateTime, 0).In(MCPTimeZone).Format(MCPTimeLayout)
	}
	page, next := pageOf(chats, offset)
	return map[string]any{"chats": page, "has_more": next != "", "next_cursor": next}, nil
}

// getMessageTool is get_message.
type getMessageTool struct{}

func (getMessageTool) call(s *Server, cc mcpCall, raw json.RawMessage) (any, error) {
	var q msgRange
	if err := json.Unmarshal(raw, &q); err != nil {
		return nil, bizInvalid("arguments must be {\"chat_type\":1|2,\"chatid\":…,\"begin_time\":…,\"end_time\":…,\"cursor\":…}")
	}
	chatType := map[int]string{wecom.ChatTypeSingle: wecom.ChatSingle, wecom.ChatTypeGroup: wecom.ChatGroup}[q.ChatType]
	if chatType == "" || q.ChatID == "" {
		return nil, bizInvalid("chat_type (1 single, 2 group) and chatid are required")
	}
	from, to, offset, err := q.parse(s.now())
	if err != nil {
		return nil, err
	}
	msgs, err := s.visible(cc, from, to)
	if err != nil {
		return nil, err
	}
	type text struct {
		Content string `json:"content"`
	}
	type message struct {
		UserID   string `json:"userid"`
		SendTime string `json:"send_time"`
		MsgType  string `json:"msgtype"`
		Text     *text  `json:"text,omitempty"`
	}
	var out []message
	for _, m := range msgs {
		if m.Chat != q.ChatID || m.ChatType != chatType {
			continue
		}
		mm := message{UserID: m.UserID, SendTime: time.Unix(m.CreateTime, 0).In(MCPTimeZone).Format(MCPTimeLayout), MsgType: m.msgType}
		if m.msgType == wecom.MsgTypeText {
			mm.Text = &text{Content: m.Text}
		}
		out = append(out, mm)
	}
	page, next := pageOf(out, offset)
	return map[string]any{"messages": page, "next_cursor": next}, nil
}

// pageOf is the page of items at offset, and the cursor of the next one
// ("" for the last).
func pageOf[T any](items []T, offset int) ([]T, string) {
	if offset > len(items) {
		offset = len(items)
	}
	end := min(offset+mcpPageSize, len(items))
	page := items[offset:end]
	if page == nil {
		page = []T{}
	}
	if end < len(items) {
		return page, strconv.Itoa(end)
	}
	return page, ""
}

// sendMessageTool is send_message: a text to a chat of the bot's, kept in
// its transcript as a proactive "text" from the bot.
type sendMessageTool struct{}

func (sendMessageTool) call(s *Server, cc mcpCall, raw json.RawMessage) (any, error) {
	var q struct {
		ChatType int    `json:"chat_type"`
		ChatID   string `json:"chatid"`
		MsgType  string `json:"msgtype"`
		Text     struct {
			Content string `json:"content"`
		} `json:"text"`
	}
	if err := json.Unmarshal(raw, &q); err != nil {
		return nil, bizInvalid("arguments must be {\"chat_type\":1|2,\"chatid\":…,\"msgtype\":\"text\",\"text\":{\"content\":…}}")
	}
	chatType := map[int]string{wecom.ChatTypeSingle: wecom.ChatSingle, wecom.ChatTypeGroup: wecom.ChatGroup}[q.ChatType]
	switch {
	case chatType == "" || q.ChatID == "":
		return nil, bizInvalid("chat_type (1 single, 2 group) and chatid are required")
	case q.MsgType != wecom.MsgTypeText:
		return nil, &mcpBizError{code: wecom.ErrCodeInvalidMsgType, msg: "msgtype " + quote(q.MsgType) + ": only text is supported"}
	case q.Text.Content == "":
		return nil, bizInvalid("text.content is required")
	case len(q.Text.Content) > MCPMaxSendBytes:
		return nil, bizInvalid("text.content is " + strconv.Itoa(len(q.Text.Content)) + " bytes: at most " + strconv.Itoa(MCPMaxSendBytes))
	}
	if _, err := s.authorize(cc); err != nil {
		return nil, err
	}
	b, err := s.bot(cc.bot)
	if err != nil {
		return nil, err
	}
	now := s.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := b.chats[q.ChatID]
	if ch == nil || ch.chatType != chatType {
		b.stats.ChatNotFound++
		return nil, &mcpBizError{code: wecom.ErrCodeChatNotFound, msg: "chat not found: no " + chatType + " chat " + quote(q.ChatID) + " has talked to this bot"}
	}
	times := b.sent[ch.key]
	over := overQuota(&times, now, s.frameCaps(), "frames")
	b.sent[ch.key] = times
	if over != "" {
		b.stats.QuotaRejections++
		return nil, &mcpBizError{code: wecom.ErrCodeRateLimited, msg: "api freq out of limit: " + over + " per conversation"}
	}
	b.consume(ch.key, now)
	b.addEntry(ch.key, TranscriptEntry{From: "bot", MsgID: newID("mcpsend"), Kind: wecom.MsgTypeText, Content: q.Text.Content, Finished: true})
	return map[string]any{}, nil
}
