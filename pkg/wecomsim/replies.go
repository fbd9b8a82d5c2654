package wecomsim

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
)

const (
	msgNotSubscribed = "aibot websocket not subscribed: this connection is not (or no longer) subscribed; reconnect and subscribe"
	msgInvalidReqID  = "invalid req_id"
)

// result is the verdict on a frame: errcode, errmsg and an optional ack body.
type result struct {
	code int
	msg  string
	body any
	// dropped: acked with errcode 0 but not applied (over the quota in
	// drop mode); the user never sees it.
	dropped bool
}

var accepted = result{}

func fail(code int, format string, args ...any) result {
	return result{code: code, msg: fmt.Sprintf(format, args...)}
}

// checkLive is the first check of every command: is c still the bot's
// subscribed connection? Call with b.mu held.
func (c *conn) checkLive(b *bot) (result, bool) {
	if b.live != c {
		b.stats.NotSubscribed++
		return fail(wecom.ErrCodeNotSubscribed, msgNotSubscribed), false
	}
	return accepted, true
}

// lookupReq is the second check of a reply: the req_id must come from a
// callback of the right kind, written to this connection (or, relaxed, to
// any connection of the bot). Call with b.mu held.
func (c *conn) lookupReq(b *bot, reqID string, kind reqKind, eventType string) (*pendingReq, result, bool) {
	p := b.reqs[reqID]
	switch {
	case p == nil:
		b.stats.InvalidReqIDs++
		return nil, fail(wecom.ErrCodeInvalidReqID, "%s: no callback was sent with this req_id", msgInvalidReqID), false
	case !c.s.cfg.RelaxReqIDBinding && p.connID != c.id:
		b.stats.InvalidReqIDs++
		return nil, fail(wecom.ErrCodeInvalidReqID, "%s: the callback was received on another connection; send a proactive aibot_send_msg instead", msgInvalidReqID), false
	case p.kind != kind || p.eventType != eventType:
		b.stats.InvalidReqIDs++
		want := "an aibot_msg_callback"
		if kind == reqEvent {
			want = "a " + eventType + " event"
		}
		return nil, fail(wecom.ErrCodeInvalidReqID, "%s: this command answers %s", msgInvalidReqID, want), false
	}
	return p, accepted, true
}

func (c *conn) finish(f *wecom.Frame, r result) {
	c.ack(f.Headers.ReqID, r.code, r.msg, r.body)
}

func contentTooLong(field string, n int) result {
	return fail(wecom.ErrCodeContentTooLong, "%s is %d bytes: at most %d bytes of UTF-8 allowed", field, n, wecom.MaxContentBytes)
}

// cardJSON is a template card as the transcript shows it: compact JSON.
func cardJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return string(raw)
	}
	return buf.String()
}

func hasCard(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && !bytes.Equal(t, []byte("null")) && t[0] == '{'
}

// apply runs a frame's rule under the bot's lock, records it for the
// latency recorder if record is set, then acks it: recorded before the
// ack, so a bot that has its ack finds the frame in the recording.
func (c *conn) apply(b *bot, f *wecom.Frame, rule func(*bot, *wecom.Frame, time.Time) result, record func(*bot, *wecom.Frame, result, time.Time)) {
	now := c.s.now()
	b.mu.Lock()
	r := rule(b, f, now)
	b.mu.Unlock()
	if record != nil {
		record(b, f, r, now)
	}
	c.finish(f, r)
}

func (c *conn) respondMsg(b *bot, f *wecom.Frame) {
	if c.dropsOn(b, f) {
		return
	}
	c.apply(b, f, c.respondMsgLocked, c.replyRecorded)
}

// dropsOn plays drop_on_reply: f replies to a callback whose message the
// fault names, so the connection drops (as the drop fault) and f is
// neither applied nor acked.
func (c *conn) dropsOn(b *bot, f *wecom.Frame) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.reqs[f.Headers.ReqID]
	if p == nil || !b.dropOnReply[p.msgid] {
		return false
	}
	delete(b.dropOnReply, p.msgid)
	if b.live == c {
		b.live = nil
		b.stats.Drops++
	}
	c.log.Info().Str("msgid", p.msgid).Msg("drop_on_reply: connection dropped as the reply came")
	c.abort()
	if c.s.rec.on.Load() {
		c.s.recordFrameAs(RecordDropped, b.id, f, p.chat, p.msgid, c.s.now())
	}
	return true
}

// respondMsgLocked checks in order: subscribed → req_id → body → stream
// state → quota, and applies the frame only if every check passed.
func (c *conn) respondMsgLocked(b *bot, f *wecom.Frame, now time.Time) result {
	if r, ok := c.checkLive(b); !ok {
		return r
	}
	p, r, ok := c.lookupReq(b, f.Headers.ReqID, reqMsg, "")
	if !ok {
		return r
	}
	var body wecom.RespondBody
	if err := decodeBody(f.Body, &body); err != nil {
		return fail(wecom.ErrCodeInvalidParam, "aibot_respond_msg: body is not valid: %v", err)
	}
	switch body.MsgType {
	case wecom.MsgTypeStream, wecom.MsgTypeStreamWithTemplateCard:
		return c.streamFrame(b, f.Headers.ReqID, p, &body, now)
	case wecom.MsgTypeTemplateCard:
		if !hasCard(body.TemplateCard) {
			return fail(wecom.ErrCodeInvalidParam, "template_card is required (a JSON object) for msgtype template_card")
		}
		if r, ok := c.quotaCheck(b, p.chat, now); !ok {
			return r
		}
		b.consume(p.chat, now)
		b.addEntry(p.chat, TranscriptEntry{From: "bot", MsgID: newID("reply"), ReplyTo: p.msgid,
			Kind: wecom.MsgTypeTemplateCard, Content: cardJSON(body.TemplateCard), Finished: true})
		return accepted
	default:
		if isMediaType(body.MsgType) {
			info, r, ok := checkMedia(b, body.MsgType, f.Body)
			if !ok {
				return r
			}
			if r, ok := c.quotaCheck(b, p.chat, now); !ok {
				return r
			}
			b.consume(p.chat, now)
			up := *info
			b.addEntry(p.chat, TranscriptEntry{From: "bot", MsgID: newID("reply"), ReplyTo: p.msgid,
				Kind: body.MsgType, Content: info.MediaID, Upload: &up, Finished: true, ImageIDs: c.s.shownIDs(info.MediaID)})
			return accepted
		}
		return fail(wecom.ErrCodeInvalidMsgType, "invalid msgtype %s for aibot_respond_msg: use stream, template_card, stream_with_template_card or uploaded media", quote(body.MsgType))
	}
}

func (c *conn) streamFrame(b *bot, reqID string, p *pendingReq, body *wecom.RespondBody, now time.Time) result {
	s := body.Stream
	if s == nil || s.ID == "" {
		return fail(wecom.ErrCodeInvalidParam, "stream.id is required: pick one id per reply and keep it on every frame")
	}
	if n := len(s.Content); n > wecom.MaxContentBytes {
		return contentTooLong("stream.content", n)
	}
	// stream_with_template_card: the card may come on the first frame or a
	// later one, once (the official SDK's replyStreamWithCard: "template_card
	// 可首次回复，也可在后续回复中发送，但同一个消息只能回复一次").
	card := body.MsgType == wecom.MsgTypeStreamWithTemplateCard && len(body.TemplateCard) > 0 && !bytes.Equal(bytes.TrimSpace(body.TemplateCard), []byte("null"))
	if card && !hasCard(body.TemplateCard) {
		return fail(wecom.ErrCodeInvalidParam, "template_card must be a JSON object")
	}
	st := b.streams[s.ID]
	if st != nil && st.reqID != reqID {
		return fail(wecom.ErrCodeInvalidParam, "stream.id %s belongs to another req_id: use a new stream id for each reply", quote(s.ID))
	}
	if card && st != nil && st.entry.Card != "" {
		return fail(wecom.ErrCodeInvalidParam, "template_card was already sent on stream %s: a message gets one card", quote(s.ID))
	}
	if len(s.MsgItem) > 0 && !s.Finish {
		return fail(wecom.ErrCodeInvalidParam, "stream.msg_item is only allowed on the finishing frame (finish: true)")
	}
	if len(s.MsgItem) > wecom.MaxMsgItems {
		return fail(wecom.ErrCodeInvalidParam, "stream.msg_item has %d items: at most %d", len(s.MsgItem), wecom.MaxMsgItems)
	}
	imageMD5, r := checkMsgItems(s.MsgItem)
	if r.code != 0 {
		return r
	}
	if s.Feedback != nil && st != nil {
		return fail(wecom.ErrCodeInvalidParam, "stream.feedback is only allowed on the first frame of a stream")
	}
	if s.Feedback != nil && (s.Feedback.ID == "" || len(s.Feedback.ID) > wecom.MaxFeedbackIDBytes) {
		return fail(wecom.ErrCodeInvalidParam, "stream.feedback.id is %d bytes: want 1 to %d bytes of UTF-8", len(s.Feedback.ID), wecom.MaxFeedbackIDBytes)
	}
	if b.noStream[p.chat] {
		return fail(wecom.ErrCodeDeviceUnsupported, "device type not supported: this user's client cannot show stream messages; send markdown with aibot_send_msg")
	}
	if st != nil {
		if st.finished {
			b.stats.FinishedFrames++
			return fail(wecom.ErrCodeStreamExpired, "stream message update expired: stream %s is already finished", quote(s.ID))
		}
		if now.Sub(st.start) > c.s.cfg.StreamWindow {
			b.stats.ExpiredUpdates++
			st.entry.Expired = true
			return fail(wecom.ErrCodeStreamExpired, "stream message update expired: stream %s started %v ago, the window is %v", quote(s.ID), now.Sub(st.start).Round(time.Millisecond), c.s.cfg.StreamWindow)
		}
	}
	if r, ok := c.quotaCheck(b, p.chat, now); !ok {
		return r
	}
	b.consume(p.chat, now)
	if st == nil {
		st = &stream{reqID: reqID, start: now}
		st.entry = b.addEntry(p.chat, TranscriptEntry{From: "bot", MsgID: newID("reply"), ReplyTo: p.msgid,
			Kind: body.MsgType, StreamID: s.ID})
		b.streams[s.ID] = st
		if s.Feedback != nil {
			st.entry.FeedbackID = s.Feedback.ID
			b.feedbackIDs[s.Feedback.ID] = true
		}
	}
	st.entry.Content = s.Content
	st.entry.Images = len(s.MsgItem)
	st.entry.ImageMD5 = imageMD5
	for _, it := range s.MsgItem { // checked: base64 of an image
		data, _ := base64.StdEncoding.DecodeString(it.Image.Base64)
		st.entry.ImageIDs = append(st.entry.ImageIDs, c.s.keepImage(data))
	}
	if card {
		st.entry.Kind = body.MsgType
		st.entry.Card = cardJSON(body.TemplateCard)
	}
	if s.Finish {
		st.finished = true
		st.entry.Finished = true
	}
	return accepted
}

// eventReq finds the event req_id a welcome or card update answers, valid
// only within window after the event and only once.
func (c *conn) eventReq(b *bot, f *wecom.Frame, now time.Time, eventType string, window time.Duration, what, used string) (*pendingReq, result, bool) {
	p, r, ok := c.lookupReq(b, f.Headers.ReqID, reqEvent, eventType)
	if !ok {
		return nil, r, false
	}
	if now.Sub(p.at) > window {
		b.stats.InvalidReqIDs++
		return nil, fail(wecom.ErrCodeInvalidReqID, "%s: the %s window (%v after %s) has passed", msgInvalidReqID, what, window, eventType), false
	}
	if p.used {
		b.stats.InvalidReqIDs++
		return nil, fail(wecom.ErrCodeInvalidReqID, "%s: %s", msgInvalidReqID, used), false
	}
	return p, accepted, true
}

func (c *conn) respondWelcome(b *bot, f *wecom.Frame) {
	c.apply(b, f, c.respondWelcomeLocked, c.replyRecorded)
}

func (c *conn) respondWelcomeLocked(b *bot, f *wecom.Frame, now time.Time) result {
	if r, ok := c.checkLive(b); !ok {
		return r
	}
	p, r, ok := c.eventReq(b, f, now, wecom.EventEnterChat, c.s.cfg.WelcomeWindow, "welcome",
		"a welcome message was already sent for this enter_chat")
	if !ok {
		return r
	}
	var body wecom.WelcomeBody
	if err := decodeBody(f.Body, &body); err != nil {
		return fail(wecom.ErrCodeInvalidParam, "aibot_respond_welcome_msg: body is not valid: %v", err)
	}
	var content string
	switch body.MsgType {
	case wecom.MsgTypeText:
		if body.Text == nil || body.Text.Content == "" {
			return fail(wecom.ErrCodeInvalidParam, "text.content is required for a text welcome message")
		}
		if n := len(body.Text.Content); n > wecom.MaxContentBytes {
			return contentTooLong("text.content", n)
		}
		content = body.Text.Content
	case wecom.MsgTypeTemplateCard:
		if !hasCard(body.TemplateCard) {
			return fail(wecom.ErrCodeInvalidParam, "template_card is required (a JSON object) for msgtype template_card")
		}
		content = cardJSON(body.TemplateCard)
	default:
		return fail(wecom.ErrCodeInvalidMsgType, "invalid msgtype %s for aibot_respond_welcome_msg: use text or template_card", quote(body.MsgType))
	}
	if r, ok := c.quotaCheck(b, p.chat, now); !ok {
		return r
	}
	b.consume(p.chat, now)
	p.used = true
	b.addEntry(p.chat, TranscriptEntry{From: "bot", MsgID: newID("welcome"), ReplyTo: p.msgid,
		Kind: "welcome", Content: content, Finished: true})
	return accepted
}

// enterEventReplyLocked takes the version a bot reports for an
// enter_check_update: once per event, within the welcome window (the
// window is assumed: WeCom documents none), a non-empty version. It is
// shown to no user and costs no quota.
func (c *conn) enterEventReplyLocked(b *bot, f *wecom.Frame, now time.Time) result {
	if r, ok := c.checkLive(b); !ok {
		return r
	}
	p, r, ok := c.eventReq(b, f, now, wecom.EventEnterCheckUpdate, c.s.cfg.WelcomeWindow, "version reply",
		"a version was already reported for this enter_check_update")
	if !ok {
		return r
	}
	var body wecom.EnterEventBody
	if err := decodeBody(f.Body, &body); err != nil {
		return fail(wecom.ErrCodeInvalidParam, "ww_ai_robot_enter_event: body is not valid: %v", err)
	}
	if body.Version == "" || len(body.Version) > 64 {
		return fail(wecom.ErrCodeInvalidParam, "ww_ai_robot_enter_event: version is required, at most 64 bytes: send {\"version\": \"1.2.3\"}")
	}
	p.used = true
	b.version = body.Version
	return accepted
}

func (c *conn) respondUpdate(b *bot, f *wecom.Frame) {
	c.apply(b, f, c.respondUpdateLocked, c.replyRecorded)
}

func (c *conn) respondUpdateLocked(b *bot, f *wecom.Frame, now time.Time) result {
	if r, ok := c.checkLive(b); !ok {
		return r
	}
	p, r, ok := c.eventReq(b, f, now, wecom.EventTemplateCardEvent, c.s.cfg.UpdateWindow, "update",
		"the card was already updated for this template_card_event")
	if !ok {
		return r
	}
	var body wecom.UpdateBody
	if err := decodeBody(f.Body, &body); err != nil {
		return fail(wecom.ErrCodeInvalidParam, "aibot_respond_update_msg: body is not valid: %v", err)
	}
	if body.ResponseType != wecom.ResponseTypeUpdateTemplateCard {
		return fail(wecom.ErrCodeInvalidParam, "response_type %s: want %s", quote(body.ResponseType), wecom.ResponseTypeUpdateTemplateCard)
	}
	if !hasCard(body.TemplateCard) {
		return fail(wecom.ErrCodeInvalidParam, "template_card is required (a JSON object)")
	}
	// The official SDK's updateTemplateCard: "task_id 需跟回调收到的 task_id
	// 一致" (the card's task_id must be the clicked card's).
	var target struct {
		TaskID string `json:"task_id"`
	}
	_ = json.Unmarshal(body.TemplateCard, &target)
	if p.taskID != "" && target.TaskID != p.taskID {
		return fail(wecom.ErrCodeInvalidParam, "template_card.task_id %s: the clicked card's is %s; an update replaces that card", quote(target.TaskID), quote(p.taskID))
	}
	if r, ok := c.quotaCheck(b, p.chat, now); !ok {
		return r
	}
	b.consume(p.chat, now)
	p.used = true
	b.addEntry(p.chat, TranscriptEntry{From: "bot", MsgID: newID("update"), ReplyTo: p.msgid,
		Kind: wecom.ResponseTypeUpdateTemplateCard, Content: cardJSON(body.TemplateCard), UserIDs: body.UserIDs, Finished: true})
	return accepted
}

func (c *conn) sendMsg(b *bot, f *wecom.Frame) { c.apply(b, f, c.sendMsgLocked, c.pushRecorded) }

func (c *conn) sendMsgLocked(b *bot, f *wecom.Frame, now time.Time) result {
	if r, ok := c.checkLive(b); !ok {
		return r
	}
	var body wecom.SendMsgBody
	if err := decodeBody(f.Body, &body); err != nil {
		return fail(wecom.ErrCodeInvalidParam, "aibot_send_msg: body is not valid: %v", err)
	}
	if body.ChatID == "" {
		return fail(wecom.ErrCodeInvalidParam, "chatid is required: the user id for a single chat, the group chat id for a group")
	}
	if body.ChatType != 0 && body.ChatType != wecom.ChatTypeSingle && body.ChatType != wecom.ChatTypeGroup {
		return fail(wecom.ErrCodeInvalidParam, "chat_type %d: want 1 (single), 2 (group) or omitted", body.ChatType)
	}
	ch := b.chats[body.ChatID]
	if ch == nil || (body.ChatType == wecom.ChatTypeSingle && ch.chatType != wecom.ChatSingle) ||
		(body.ChatType == wecom.ChatTypeGroup && ch.chatType != wecom.ChatGroup) {
		b.stats.ChatNotFound++
		kind := "chat"
		if body.ChatType == wecom.ChatTypeSingle {
			kind = "single chat"
		} else if body.ChatType == wecom.ChatTypeGroup {
			kind = "group chat"
		}
		return fail(wecom.ErrCodeChatNotFound, "chat not found: no %s %s has talked to this bot", kind, quote(body.ChatID))
	}
	var kind, content string
	var upload *UploadInfo
	switch body.MsgType {
	case wecom.MsgTypeMarkdown:
		if body.Markdown == nil || body.Markdown.Content == "" {
			return fail(wecom.ErrCodeInvalidParam, "markdown.content is required for msgtype markdown")
		}
		if n := len(body.Markdown.Content); n > wecom.MaxContentBytes {
			return contentTooLong("markdown.content", n)
		}
		kind, content = wecom.MsgTypeMarkdown, body.Markdown.Content
	case wecom.MsgTypeTemplateCard:
		if !hasCard(body.TemplateCard) {
			return fail(wecom.ErrCodeInvalidParam, "template_card is required (a JSON object) for msgtype template_card")
		}
		kind, content = wecom.MsgTypeTemplateCard, cardJSON(body.TemplateCard)
	default:
		if !isMediaType(body.MsgType) {
			return fail(wecom.ErrCodeInvalidMsgType, "invalid msgtype %s for aibot_send_msg: use markdown, template_card or uploaded media", quote(body.MsgType))
		}
		info, r, ok := checkMedia(b, body.MsgType, f.Body)
		if !ok {
			return r
		}
		up := *info
		kind, content, upload = body.MsgType, info.MediaID, &up
	}
	if r, ok := c.quotaCheck(b, ch.key, now); !ok {
		return r
	}
	b.consume(ch.key, now)
	b.addEntry(ch.key, TranscriptEntry{From: "bot", MsgID: newID("push"), Kind: kind, Content: content, Upload: upload, Finished: true, ImageIDs: c.s.shownIDs(content)})
	return accepted
}

// MaxReplyImageBytes is the largest msg_item image, decoded (the official
// SDK's ReplyMsgItem: "图片（base64编码前）最大不能超过10M，支持JPG、PNG格式";
// read as 10 MiB).
const MaxReplyImageBytes = 10 << 20

// checkMsgItems checks a finishing frame's images as the official SDK
// describes them: msgtype image, base64 of a JPG or PNG of at most
// MaxReplyImageBytes, and md5 the hex MD5 of those bytes. It returns the
// images' MD5s, in order, for the transcript.
func checkMsgItems(items []wecom.ReplyMsgItem) ([]string, result) {
	var sums []string
	for i, it := range items {
		if it.MsgType != wecom.MsgTypeImage || it.Image == nil {
			return nil, fail(wecom.ErrCodeInvalidParam, "stream.msg_item[%d]: want msgtype image with image {base64, md5}", i)
		}
		data, err := base64.StdEncoding.DecodeString(it.Image.Base64)
		if err != nil || len(data) == 0 {
			return nil, fail(wecom.ErrCodeInvalidParam, "stream.msg_item[%d].image.base64 must be non-empty standard base64", i)
		}
		if len(data) > MaxReplyImageBytes {
			return nil, fail(wecom.ErrCodeInvalidParam, "stream.msg_item[%d] is %d bytes: at most %d", i, len(data), MaxReplyImageBytes)
		}
		if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) && !bytes.HasPrefix(data, []byte{0xff, 0xd8, 0xff}) {
			return nil, fail(wecom.ErrCodeInvalidParam, "stream.msg_item[%d] is neither a JPG nor a PNG", i)
		}
		sum := md5.Sum(data)
		got := hex.EncodeToString(sum[:])
		if !strings.EqualFold(it.Image.MD5, got) {
			return nil, fail(wecom.ErrCodeInvalidParam, "stream.msg_item[%d].image.md5 %s: the image's MD5 is %s", i, quote(it.Image.MD5), got)
		}
		sums = append(sums, got)
	}
	return sums, accepted
}
