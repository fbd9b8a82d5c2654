package wecomsim

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
)

// MessageRequest plays a user sending a message (POST /control/messages).
type MessageRequest struct {
	BotID  string `json:"bot_id"`
	UserID string `json:"user_id"`
	Text   string `json:"text"`
	// ChatType is "single" (default) or "group".
	ChatType string `json:"chat_type,omitempty"`
	// ChatID is the group chat id; groups only.
	ChatID string `json:"chat_id,omitempty"`
	// MsgType is "text" (default), "voice" (Text is the transcription),
	// "image", "file" or "video" (the MediaPart's bytes, served encrypted
	// at a URL that expires; Text is ignored) or "mixed" (Items).
	MsgType string `json:"msgtype,omitempty"`
	// RawMsgType, instead of MsgType, sends this msgtype verbatim with no
	// content: a message type WeCom may add later, for a bot's
	// unknown-type handling.
	RawMsgType string `json:"raw_msgtype,omitempty"`
	// MediaPart is an image's, file's or video's bytes (media.go).
	MediaPart
	// Items are a mixed message's parts, in order.
	Items []MixedPart `json:"items,omitempty"`
	// Quote is the message the user quotes, if any.
	Quote *QuotePart `json:"quote,omitempty"`
	// MsgID, if it names a message already posted to this bot, replays that
	// message's callback (same msgid, same content, a new req_id): WeCom
	// redelivering a callback. An unused MsgID names the new message.
	MsgID string `json:"msgid,omitempty"`
	// CreateTime, if set (unix seconds, not in the future), is a new
	// message's create_time instead of now: WeCom redelivering a message
	// sent long ago that this simulator never saw (a test's old task). A
	// replay keeps its message's own create_time.
	CreateTime int64 `json:"create_time,omitempty"`
}

// MessageResult says what became of a posted message.
type MessageResult struct {
	MsgID     string `json:"msgid"`
	Seq       int64  `json:"seq"`
	Delivered bool   `json:"delivered"`
	// ReqID is the callback's req_id ("" when not delivered).
	ReqID string `json:"req_id"`
}

// EventRequest plays a user action (POST /control/events).
type EventRequest struct {
	BotID     string `json:"bot_id"`
	UserID    string `json:"user_id"`
	EventType string `json:"eventtype"`
	ChatType  string `json:"chat_type,omitempty"`
	ChatID    string `json:"chat_id,omitempty"`
	// EventKey and TaskID, for template_card_event: the button clicked
	// and the clicked card's task_id; CardType the card's type
	// (vote_interaction…, optional); Selected, on a card with choices,
	// the options chosen, one entry a question. The callback carries them
	// in event.template_card_event, as WeCom does.
	EventKey string            `json:"event_key,omitempty"`
	TaskID   string            `json:"task_id,omitempty"`
	CardType string            `json:"card_type,omitempty"`
	Selected []wecom.Selection `json:"selected,omitempty"`
	// FeedbackID, for feedback_event, is the feedback.id of the reply the
	// user judges: one a stream's first frame of this bot carried.
	FeedbackID string `json:"feedback_id,omitempty"`
	// FeedbackType, for feedback_event: 1 accurate, 2 inaccurate, 3 the
	// verdict withdrawn.
	FeedbackType int `json:"feedback_type,omitempty"`
	// FeedbackContent and InaccurateReasons, for an inaccurate verdict:
	// what the user wrote and the reasons ticked.
	FeedbackContent   string `json:"feedback_content,omitempty"`
	InaccurateReasons []int  `json:"inaccurate_reasons,omitempty"`
	// MsgID, if it names an event already posted to this bot, replays that
	// event's callback (same msgid, same content and create_time, a new
	// req_id; the fields above but bot_id are then ignored): WeCom
	// delivering an event again. An unused MsgID names the new event.
	MsgID string `json:"msgid,omitempty"`
}

// EventResult says what became of a posted event.
type EventResult struct {
	MsgID string `json:"msgid"`
	// ReqID is the callback's req_id, the one a welcome or card update must
	// reuse ("" when not delivered).
	ReqID     string `json:"req_id"`
	Delivered bool   `json:"delivered"`
}

// TranscriptEntry is one message as the chat shows it.
type TranscriptEntry struct {
	Seq int64 `json:"seq"`
	// From is "user" or "bot".
	From  string `json:"from"`
	MsgID string `json:"msgid"`
	// ReplyTo is the msgid of the user message or event a reply answers;
	// "" for user messages and proactive pushes.
	ReplyTo string `json:"reply_to"`
	// Kind is the msgtype: text, voice, image, file (user); stream,
	// stream_with_template_card, template_card, markdown, welcome,
	// update_template_card or a media type (bot).
	Kind string `json:"kind"`
	// Content is the text, the stream's latest accepted content, a card's
	// JSON, or a media_id.
	Content string `json:"content"`
	// Finished is true for every complete message; a stream is finished
	// once its finish frame was accepted.
	Finished bool `json:"finished"`
	// Expired is true once a frame of this stream was refused because its
	// window had passed.
	Expired  bool   `json:"expired"`
	StreamID string `json:"stream_id,omitempty"`
	// Images is the number of msg_item images on a finished stream.
	Images int `json:"images,omitempty"`
	// ImageIDs name the images a bot showed (a finishing frame's
	// msg_item, an uploaded image sent), kept a while for
	// GET /control/images?id=.
	ImageIDs []string `json:"image_ids,omitempty"`
	// Media lists a user message's media items (quoted ones included).
	Media []MediaInfo `json:"media,omitempty"`
	// FeedbackID is the feedback.id a stream's first frame carried: what
	// a feedback_event for this reply names.
	FeedbackID string `json:"feedback_id,omitempty"`
	// ImageMD5 are the MD5s of a finished stream's msg_item images, in
	// order (each checked against its bytes).
	ImageMD5 []string `json:"image_md5,omitempty"`
	// Card is the template card (compact JSON) a stream_with_template_card
	// stream carried on one of its frames.
	Card string `json:"card,omitempty"`
	// Upload is what a media reply or push sends: the upload its media_id
	// names, reassembled.
	Upload *UploadInfo `json:"upload,omitempty"`
	// UserIDs are the users an update_template_card replaces the card for
	// (none: everyone the card went to).
	UserIDs []string `json:"userids,omitempty"`
}

// Stats are a bot's totals since the server started.
type Stats struct {
	BotID           string `json:"bot_id"`
	Connections     int64  `json:"connections"`      // successful subscribes
	Kicks           int64  `json:"kicks"`            // connections replaced by a newer subscribe
	AuthFailures    int64  `json:"auth_failures"`    // subscribes with a wrong or revoked secret
	QuotaRejections int64  `json:"quota_rejections"` // 45009
	QuotaDrops      int64  `json:"quota_drops"`      // frames over the quota acked 0 and dropped (drop mode)
	QuotaMode       string `json:"quota_mode"`       // refuse or drop
	ExpiredUpdates  int64  `json:"expired_updates"`  // 846608: frame after the stream window
	InvalidReqIDs   int64  `json:"invalid_req_ids"`  // 846605, incl. late welcome / update
	Undelivered     int64  `json:"undelivered"`      // callbacks not written: no connection or silence
	// Extras.
	Connected            bool             `json:"connected"`
	Malformed            int64            `json:"malformed"`              // bad JSON, unknown cmd, missing req_id, binary
	NotSubscribed        int64            `json:"not_subscribed"`         // 846609 on a replaced/dropped subscription
	Oversized            int64            `json:"oversized"`              // frames over MaxFrameBytes (closed 1009)
	FinishedStreamFrames int64            `json:"finished_stream_frames"` // 846608: frame after finish
	ChatNotFound         int64            `json:"chat_not_found"`         // 846604
	Drops                int64            `json:"drops"`                  // connections closed by the drop fault
	LateAcks             int64            `json:"late_acks"`              // acks sent late by the late_acks fault
	SubscribeRefusals    int64            `json:"subscribe_refusals"`     // subscribes refused by refuse_subscribe
	Unsubscribed         int64            `json:"unsubscribed"`           // subscriptions ended by the unsubscribe fault
	MediaDownloads       int64            `json:"media_downloads"`        // media GETs served
	MediaExpired         int64            `json:"media_expired"`          // media GETs refused: the URL had expired
	Revoked              bool             `json:"revoked"`
	AcksStalled          bool             `json:"acks_stalled"`
	AcksLate             bool             `json:"acks_late"`
	Silenced             bool             `json:"silenced"`
	GroupsSilenced       bool             `json:"groups_silenced"` // group_silence withholds group callbacks from the subscribed connection
	SubscribeRefused     bool             `json:"subscribe_refused"`
	ReportedVersion      string           `json:"reported_version,omitempty"` // the version the bot last reported for enter_check_update
	Frames               map[string]int64 `json:"frames"`                     // frames received, by cmd, rejected ones included
	Errors               map[string]int64 `json:"errors"`                     // error acks decided, by errcode
}

// HistoryQuery selects user messages; zero fields do not filter.
type HistoryQuery struct {
	BotID    string
	AfterSeq int64
	Limit    int       // 0: no limit
	Since    time.Time // inclusive
	Until    time.Time // exclusive
}

// HistoryMessage is a user message as WeCom's message history would give it.
type HistoryMessage struct {
	Seq        int64  `json:"seq"`
	MsgID      string `json:"msgid"`
	Chat       string `json:"chat"`
	ChatType   string `json:"chat_type"`
	UserID     string `json:"user_id"`
	Text       string `json:"text"`
	CreateTime int64  `json:"create_time"`
	Delivered  bool   `json:"delivered"`
}

// BotRequest adds a bot (POST /control/bots) or gives one a new secret
// (POST /control/bots/secret).
type BotRequest struct {
	BotID  string `json:"bot_id"`
	Secret string `json:"secret"`
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}

func (s *Server) needBot(id string) (*bot, error) {
	if id == "" {
		return nil, invalid("bot_id is required")
	}
	return s.bot(id)
}

// PostMessage plays a user sending a message to a bot: it is kept in the
// history and the transcript, and written as aibot_msg_callback to the bot's
// subscribed connection if there is one (and no silence fault).
func (s *Server) PostMessage(req MessageRequest) (MessageResult, error) {
	b, err := s.needBot(req.BotID)
	if err != nil {
		return MessageResult{}, err
	}
	now := s.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.byMsgID[req.MsgID]
	if m == nil {
		if m, err = newMessage(req, now); err != nil {
			return MessageResult{}, err
		}
		var items []*servedMedia
		if m.media, items, err = s.newMedia(b.id, m.MsgID, req, now); err != nil {
			return MessageResult{}, err
		}
		s.keepMedia(items)
		b.seq++
		m.Seq = b.seq
		b.messages = append(b.messages, m)
		b.byMsgID[m.MsgID] = m
		if b.chats[m.Chat] == nil {
			b.chats[m.Chat] = &chatInfo{key: m.Chat, chatType: m.ChatType}
		}
		b.transcripts[m.Chat] = append(b.transcripts[m.Chat], &TranscriptEntry{
			Seq: m.Seq, From: "user", MsgID: m.MsgID, Kind: m.msgType, Content: m.Text, Finished: true, Media: m.media.infos()})
	}
	cb := wecom.MsgCallback{
		MsgID:      m.MsgID,
		AIBotID:    b.id,
		ChatType:   m.ChatType,
		From:       wecom.From{UserID: m.UserID},
		CreateTime: m.CreateTime,
		MsgType:    m.msgType,
	}
	if m.ChatType == wecom.ChatGroup {
		cb.ChatID = m.Chat
	}
	switch m.msgType {
	case wecom.MsgTypeText:
		cb.Text = &wecom.TextContent{Content: m.Text}
	case wecom.MsgTypeVoice:
		cb.Voice = &wecom.TextContent{Content: m.Text}
	}
	m.media.fill(&cb, s.mediaBase(b))
	reqID, delivered := s.deliverLocked(b, wecom.CmdMsgCallback, &pendingReq{kind: reqMsg, chat: m.Chat, group: m.ChatType == wecom.ChatGroup, msgid: m.MsgID, at: now}, cb, now)
	if delivered {
		m.Delivered = true
	}
	s.log.Debug().Str("bot", b.id).Str("msgid", m.MsgID).Str("req_id", reqID).Bool("delivered", delivered).Msg("user message")
	return MessageResult{MsgID: m.MsgID, Seq: m.Seq, Delivered: delivered, ReqID: reqID}, nil
}

func newMessage(req MessageRequest, now time.Time) (*message, error) {
	if req.UserID == "" {
		return nil, invalid("user_id is required")
	}
	chatType, chat, err := chatOf(req.ChatType, req.ChatID, req.UserID)
	if err != nil {
		return nil, err
	}
	msgType := req.MsgType
	if msgType == "" {
		msgType = wecom.MsgTypeText
	}
	text := req.Text
	switch {
	case req.RawMsgType != "" && req.MsgType != "":
		return nil, invalid("give msgtype or raw_msgtype, not both")
	case req.RawMsgType != "":
		msgType = req.RawMsgType
	case msgType == wecom.MsgTypeText, msgType == wecom.MsgTypeVoice:
		if text == "" {
			return nil, invalid("text is required for msgtype %s", msgType)
		}
	case msgType == wecom.MsgTypeImage, msgType == wecom.MsgTypeFile, msgType == wecom.MsgTypeVideo:
		text = ""
	case msgType == wecom.MsgTypeMixed:
		var parts []string
		for _, it := range req.Items {
			if it.MsgType == wecom.MsgTypeText {
				parts = append(parts, it.Text)
			}
		}
		text = strings.Join(parts, "\n")
	default:
		return nil, invalid("msgtype %q: want text, voice, image, file, video or mixed", msgType)
	}
	id := req.MsgID
	if id == "" {
		id = newID("msg")
	}
	created := now.Unix()
	switch {
	case req.CreateTime < 0 || req.CreateTime > created:
		return nil, invalid("create_time %d: want unix seconds, not in the future (now %d)", req.CreateTime, created)
	case req.CreateTime > 0:
		created = req.CreateTime
	}
	return &message{
		HistoryMessage: HistoryMessage{MsgID: id, Chat: chat, ChatType: chatType, UserID: req.UserID,
			Text: text, CreateTime: created},
		at:      now,
		msgType: msgType,
	}, nil
}

// chatOf validates chat_type/chat_id and returns the chat type and the
// conversation key (the user id for single chats, the chat id for groups).
func chatOf(chatType, chatID, userID string) (string, string, error) {
	switch chatType {
	case "", wecom.ChatSingle:
		if chatID != "" {
			return "", "", invalid("chat_id is only for groups: drop it or set chat_type to \"group\"")
		}
		return wecom.ChatSingle, userID, nil
	case wecom.ChatGroup:
		if chatID == "" {
			return "", "", invalid("chat_id is required when chat_type is \"group\"")
		}
		return wecom.ChatGroup, chatID, nil
	}
	return "", "", invalid("chat_type %q: want \"single\" or \"group\"", chatType)
}

// deliverLocked writes a callback to the bot's subscribed connection and
// binds its new req_id to that connection. Call with b.mu held.
func (s *Server) deliverLocked(b *bot, cmd string, p *pendingReq, body any, now time.Time) (string, bool) {
	live := b.live
	if live == nil || now.Before(b.silenceUntil) || p.group && b.groupSilencedLocked(live, now) {
		b.stats.Undelivered++
		return "", false
	}
	reqID := newReqID(cmd, now)
	data, err := callbackFrame(cmd, reqID, body)
	if err != nil {
		b.stats.Undelivered++
		return "", false
	}
	p.connID = live.id
	b.reqs[reqID] = p
	if cr := s.recordedCallback(cmd, reqID, p); cr != nil {
		cr.bot = b.id
		if !live.push(outFrame{data: data, rec: cr}) {
			delete(b.reqs, reqID)
			b.stats.Undelivered++
			return "", false
		}
		return reqID, true
	}
	if !live.enqueue(data) {
		delete(b.reqs, reqID)
		b.stats.Undelivered++
		return "", false
	}
	return reqID, true
}

// PostEvent plays a user action (enter_chat, template_card_event,
// feedback_event…), written as aibot_event_callback; or replays an event
// posted before (req.MsgID).
func (s *Server) PostEvent(req EventRequest) (EventResult, error) {
	b, err := s.needBot(req.BotID)
	if err != nil {
		return EventResult{}, err
	}
	if req.MsgID != "" {
		b.mu.Lock()
		e, message := b.events[req.MsgID], b.byMsgID[req.MsgID] != nil
		b.mu.Unlock()
		switch {
		case e != nil:
			return s.deliverEvent(b, e), nil
		case message:
			return EventResult{}, invalid("msgid %s names a message of this bot, not an event: post it to /control/messages to replay it", quote(req.MsgID))
		}
	}
	if req.UserID == "" {
		return EventResult{}, invalid("user_id is required")
	}
	switch req.EventType {
	case "":
		return EventResult{}, invalid("eventtype is required: enter_chat, enter_check_update, template_card_event or feedback_event")
	case wecom.EventDisconnected:
		return EventResult{}, invalid("disconnected_event is sent by the server itself when a connection is replaced: subscribe a second connection instead")
	}
	chatType, chat, err := chatOf(req.ChatType, req.ChatID, req.UserID)
	if err != nil {
		return EventResult{}, err
	}
	if req.EventType == wecom.EventEnterChat && chatType != wecom.ChatSingle {
		return EventResult{}, invalid("enter_chat happens only in single chats: drop chat_type/chat_id")
	}
	ev := wecom.Event{EventType: req.EventType}
	switch req.EventType {
	case wecom.EventFeedback:
		if ev.Feedback, err = s.feedbackEvent(b, req); err != nil {
			return EventResult{}, err
		}
	case wecom.EventTemplateCardEvent:
		if err := checkSelected(req.Selected); err != nil {
			return EventResult{}, err
		}
		ev = wecom.NewTemplateCardEvent(req.CardType, req.EventKey, req.TaskID, req.Selected)
	default:
		if len(req.Selected) > 0 || req.CardType != "" {
			return EventResult{}, invalid("selected and card_type are a template_card_event's, not %s's", quote(req.EventType))
		}
		ev.EventKey, ev.TaskID = req.EventKey, req.TaskID
	}
	id := req.MsgID
	if id == "" {
		id = newID("msg")
	}
	e := &event{chat: chat, cb: wecom.EventCallback{
		MsgID:      id,
		CreateTime: s.now().Unix(),
		AIBotID:    b.id,
		ChatType:   chatType,
		From:       wecom.From{UserID: req.UserID},
		MsgType:    wecom.MsgTypeEvent,
		Event:      ev,
	}}
	if chatType == wecom.ChatGroup {
		e.cb.ChatID = chat
	}
	b.mu.Lock()
	if b.events[id] != nil { // posted meanwhile with this msgid: replayed, as if it had been seen above
		e = b.events[id]
	}
	b.events[id] = e
	b.mu.Unlock()
	return s.deliverEvent(b, e), nil
}

// deliverEvent writes e's callback, with a new req_id, to b's
// subscribed connection.
func (s *Server) deliverEvent(b *bot, e *event) EventResult {
	now := s.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	ev := e.cb.Event
	taskID := ev.TaskID
	if ev.TemplateCard != nil {
		taskID = ev.TemplateCard.TaskID
	}
	reqID, delivered := s.deliverLocked(b, wecom.CmdEventCallback,
		&pendingReq{kind: reqEvent, eventType: ev.EventType, chat: e.chat, group: e.cb.ChatType == wecom.ChatGroup, msgid: e.cb.MsgID, at: now, taskID: taskID}, e.cb, now)
	s.log.Debug().Str("bot", b.id).Str("event", ev.EventType).Str("msgid", e.cb.MsgID).Str("req_id", reqID).Bool("delivered", delivered).Msg("user event")
	return EventResult{MsgID: e.cb.MsgID, ReqID: reqID, Delivered: delivered}
}

// Transcript is what chat (a user id for a single chat, a group chat id)
// shows, in order; nil for an unknown bot.
func (s *Server) Transcript(botID, chat string) []TranscriptEntry {
	t, _ := s.transcript(botID, chat)
	return t
}

func (s *Server) transcript(botID, chat string) ([]TranscriptEntry, error) {
	b, err := s.needBot(botID)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]TranscriptEntry, 0, len(b.transcripts[chat]))
	for _, e := range b.transcripts[chat] {
		out = append(out, *e)
	}
	return out, nil
}

// Stats returns the bot's totals since the start.
func (s *Server) Stats(botID string) (Stats, error) {
	b, err := s.needBot(botID)
	if err != nil {
		return Stats{}, err
	}
	now := s.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	c := &b.stats
	st := Stats{
		BotID:                b.id,
		Connections:          c.Connections,
		Kicks:                c.Kicks,
		AuthFailures:         c.AuthFailures,
		QuotaRejections:      c.QuotaRejections,
		QuotaDrops:           c.QuotaDrops,
		ExpiredUpdates:       c.ExpiredUpdates,
		InvalidReqIDs:        c.InvalidReqIDs,
		Undelivered:          c.Undelivered,
		Connected:            b.live != nil,
		QuotaMode:            s.cfg.QuotaMode,
		Malformed:            c.Malformed,
		NotSubscribed:        c.NotSubscribed,
		Oversized:            c.Oversized,
		FinishedStreamFrames: c.FinishedFrames,
		ChatNotFound:         c.ChatNotFound,
		Drops:                c.Drops,
		LateAcks:             c.LateAcks,
		SubscribeRefusals:    c.SubRefusals,
		Unsubscribed:         c.Unsubscribed,
		MediaDownloads:       c.MediaDownloads,
		MediaExpired:         c.MediaExpired,
		Revoked:              b.revoked,
		AcksStalled:          now.Before(b.stallUntil),
		AcksLate:             now.Before(b.lateUntil),
		Silenced:             now.Before(b.silenceUntil),
		GroupsSilenced:       b.groupSilencedLocked(b.live, now),
		SubscribeRefused:     now.Before(b.refuseUntil),
		ReportedVersion:      b.version,
		Frames:               make(map[string]int64, len(c.Frames)),
		Errors:               make(map[string]int64, len(c.Errors)),
	}
	if b.quotaMode != "" {
		st.QuotaMode = b.quotaMode
	}
	for k, v := range c.Frames {
		st.Frames[k] = v
	}
	for k, v := range c.Errors {
		st.Errors[strconv.Itoa(k)] = v
	}
	return st, nil
}

// History returns the bot's user messages matching q, ascending by seq.
func (s *Server) History(q HistoryQuery) ([]HistoryMessage, error) {
	b, err := s.needBot(q.BotID)
	if err != nil {
		return nil, err
	}
	if q.Limit < 0 || q.AfterSeq < 0 {
		return nil, invalid("limit and after_seq must not be negative")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// messages are appended with increasing seq: start after AfterSeq.
	i := sort.Search(len(b.messages), func(i int) bool { return b.messages[i].Seq > q.AfterSeq })
	out := []HistoryMessage{}
	for ; i < len(b.messages); i++ {
		m := b.messages[i]
		if !q.Since.IsZero() && m.at.Before(q.Since) {
			continue
		}
		if !q.Until.IsZero() && !m.at.Before(q.Until) {
			continue
		}
		out = append(out, m.HistoryMessage)
		if q.Limit > 0 && len(out) == q.Limit {
			break
		}
	}
	return out, nil
}

// SetSecret plays an admin regenerating bot's secret in WeCom's console:
// from now on a subscribe must give secret. The connection subscribed
// now is kept (WeCom does not drop it), until a subscribe with the new
// secret replaces it.
func (s *Server) SetSecret(botID, secret string) error {
	if secret == "" {
		return invalid("secret is required")
	}
	b, err := s.needBot(botID)
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.secret = secret
	b.mu.Unlock()
	s.log.Info().Str("bot", botID).Msg("bot secret changed (the live connection is kept)")
	return nil
}

// checkSelected refuses a click's choices WeCom would never send: a
// question without its key, or without an option chosen.
func checkSelected(sel []wecom.Selection) error {
	for i, q := range sel {
		if q.QuestionKey == "" {
			return invalid("selected[%d] has no question_key", i)
		}
		if len(q.OptionIDs) == 0 || slices.Contains(q.OptionIDs, "") {
			return invalid("selected[%d] (question_key %s) needs option_ids, none empty", i, quote(q.QuestionKey))
		}
	}
	return nil
}
