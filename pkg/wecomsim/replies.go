package wecomsim

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
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

// mediaRef is the media part of a reply or push that carries an upload.
type mediaRef struct {
	Image *struct {
		MediaID string `json:"media_id"`
	} `json:"image"`
	File *struct {
		MediaID string `json:"media_id"`
	} `json:"file"`
	Voice *struct {
		MediaID string `json:"media_id"`
	} `json:"voice"`
	Video *struct {
		MediaID string `json:"media_id"`
	} `json:"video"`
}

func isMediaType(t string) bool {
	switch t {
	case wecom.MsgTypeImage, wecom.MsgTypeFile, wecom.MsgTypeVoice, wecom.MsgTypeVideo:
		return true
	}
	return false
}

// checkMedia validates a media reply or push: the media_id must come from a
// finished upload of this bot. Call with b.mu held.
func checkMedia(b *bot, msgType string, raw json.RawMessage) (string, result, bool) {
	var m mediaRef
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", fail(wecom.ErrCodeInvalidParam, "body is not valid: %v", err), false
	}
	var id string
	switch msgType {
	case wecom.MsgTypeImage:
		if m.Image != nil {
			id = m.Image.MediaID
		}
	case wecom.MsgTypeFile:
		if m.File != nil {
			id = m.File.MediaID
		}
	case wecom.MsgTypeVoice:
		if m.Voice != nil {
			id = m.Voice.MediaID
		}
	case wecom.MsgTypeVideo:
		if m.Video != nil {
			id = m.Video.MediaID
		}
	}
	if id == "" {
		return "", fail(wecom.ErrCodeInvalidParam, "%s.media_id is required: upload the media first", msgType), false
	}
	if !b.media[id] {
		return "", fail(wecom.ErrCodeInvalidParam, "%s.media_id %s is unknown: finish an upload first", msgType, quote(id)), false
	}
	return id, accepted, true
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

func (c *conn) respondMsg(b *bot, f *wecom.Frame) { c.apply(b, f, c.respondMsgLocked, c.replyRecorded) }

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
			id, r, ok := checkMedia(b, body.MsgType, f.Body)
			if !ok {
				return r
			}
			if r, ok := c.quotaCheck(b, p.chat, now); !ok {
				return r
			}
			b.consume(p.chat, now)
			b.addEntry(p.chat, TranscriptEntry{From: "bot", MsgID: newID("reply"), ReplyTo: p.msgid,
				Kind: body.MsgType, Content: id, Finished: true, ImageIDs: c.s.shownIDs(id)})
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
	if body.MsgType == wecom.MsgTypeStreamWithTemplateCard && !hasCard(body.TemplateCard) {
		return fail(wecom.ErrCodeInvalidParam, "template_card is required (a JSON object) for msgtype stream_with_template_card")
	}
	st := b.streams[s.ID]
	if st != nil && st.reqID != reqID {
		return fail(wecom.ErrCodeInvalidParam, "stream.id %s belongs to another req_id: use a new stream id for each reply", quote(s.ID))
	}
	if len(s.MsgItem) > 0 && !s.Finish {
		return fail(wecom.ErrCodeInvalidParam, "stream.msg_item is only allowed on the finishing frame (finish: true)")
	}
	if len(s.MsgItem) > wecom.MaxMsgItems {
		return fail(wecom.ErrCodeInvalidParam, "stream.msg_item has %d items: at most %d", len(s.MsgItem), wecom.MaxMsgItems)
	}
	for i, it := range s.MsgItem {
		if r, ok := checkMsgItem(i, it); !ok {
			return r
		}
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
	for _, it := range s.MsgItem { // checked: base64 of an image
		data, _ := base64.StdEncoding.DecodeString(it.Image.Base64)
		st.entry.ImageIDs = append(st.entry.ImageIDs, c.s.keepImage(data))
	}
	if hasCard(body.TemplateCard) {
		st.entry.Card = cardJSON(body.TemplateCard)
	}
	if s.Finish {
		st.finished = true
		st.entry.Finished = true
	}
	return accepted
}

// checkMsgItem checks item i of a finishing frame's msg_item: an image,
// standard base64 of a JPG or PNG of at most 10 MB, whose md5 is given.
func checkMsgItem(i int, it wecom.ReplyMsgItem) (result, bool) {
	if it.MsgType != wecom.MsgTypeImage || it.Image == nil {
		return fail(wecom.ErrCodeInvalidParam, "stream.msg_item[%d]: msgtype %s: only image items with an image are allowed", i, quote(it.MsgType)), false
	}
	data, err := base64.StdEncoding.DecodeString(it.Image.Base64)
	if err != nil || len(data) == 0 {
		return fail(wecom.ErrCodeInvalidParam, "stream.msg_item[%d].image.base64 must be non-empty standard base64", i), false
	}
	if len(data) > maxReplyImageBytes {
		return fail(wecom.ErrCodeInvalidParam, "stream.msg_item[%d]: image is %d bytes: at most %d (10 MB)", i, len(data), maxReplyImageBytes), false
	}
	if mt := http.DetectContentType(data); mt != "image/png" && mt != "image/jpeg" {
		return fail(wecom.ErrCodeInvalidParam, "stream.msg_item[%d]: image is %s: only JPG or PNG", i, mt), false
	}
	sum := md5.Sum(data)
	if got := hex.EncodeToString(sum[:]); !strings.EqualFold(got, it.Image.MD5) {
		return fail(wecom.ErrCodeInvalidParam, "stream.msg_item[%d].image.md5 %s does not match the image's %s", i, quote(it.Image.MD5), got), false
	}
	return accepted, true
}

// maxReplyImageBytes is the largest msg_item image (the official SDK).
const maxReplyImageBytes = 10 << 20

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
	if r, ok := c.quotaCheck(b, p.chat, now); !ok {
		return r
	}
	b.consume(p.chat, now)
	p.used = true
	b.addEntry(p.chat, TranscriptEntry{From: "bot", MsgID: newID("update"), ReplyTo: p.msgid,
		Kind: wecom.ResponseTypeUpdateTemplateCard, Content: cardJSON(body.TemplateCard), Finished: true})
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
		id, r, ok := checkMedia(b, body.MsgType, f.Body)
		if !ok {
			return r
		}
		kind, content = body.MsgType, id
	}
	if r, ok := c.quotaCheck(b, ch.key, now); !ok {
		return r
	}
	b.consume(ch.key, now)
	b.addEntry(ch.key, TranscriptEntry{From: "bot", MsgID: newID("push"), Kind: kind, Content: content, Finished: true, ImageIDs: c.s.shownIDs(content)})
	return accepted
}

func (c *conn) upload(b *bot, f *wecom.Frame) {
	b.mu.Lock()
	r, u := c.uploadLocked(b, f)
	b.mu.Unlock()
	var written func()
	if u != nil { // a chunk accepted: in flight until its ack is written
		written = func() {
			b.mu.Lock()
			u.inflight--
			b.mu.Unlock()
		}
	}
	c.ackFor(c.bot, f.Headers.ReqID, r.code, r.msg, r.body, written)
}

// uploadLocked is an upload command's verdict, and the upload a chunk
// accepted belongs to (nil otherwise).
func (c *conn) uploadLocked(b *bot, f *wecom.Frame) (result, *upload) {
	if r, ok := c.checkLive(b); !ok {
		return r, nil
	}
	switch f.Cmd {
	case wecom.CmdUploadMediaInit:
		var body wecom.UploadInitBody
		if err := decodeBody(f.Body, &body); err != nil {
			return fail(wecom.ErrCodeInvalidParam, "aibot_upload_media_init: body is not valid: %v", err), nil
		}
		if !isMediaType(body.Type) {
			return fail(wecom.ErrCodeInvalidParam, "type %s: want image, file, voice or video", quote(body.Type)), nil
		}
		if body.TotalChunks < 1 || body.TotalChunks > wecom.MaxUploadChunks {
			return fail(wecom.ErrCodeInvalidParam, "total_chunks %d: want 1 to %d", body.TotalChunks, wecom.MaxUploadChunks), nil
		}
		if body.TotalSize <= 0 || body.TotalSize > int64(body.TotalChunks)*wecom.MaxUploadChunkBytes {
			return fail(wecom.ErrCodeInvalidParam, "total_size %d: want 1 to %d bytes for %d chunks", body.TotalSize, int64(body.TotalChunks)*wecom.MaxUploadChunkBytes, body.TotalChunks), nil
		}
		if r, ok := c.uploadQuotaCheck(b, c.s.now()); !ok {
			return r, nil
		}
		id := newID("upload")
		b.uploads[id] = &upload{kind: body.Type, total: body.TotalChunks, md5: strings.ToLower(body.MD5), chunks: make(map[int][]byte)}
		return result{body: wecom.UploadInitResult{UploadID: id}}, nil
	case wecom.CmdUploadMediaChunk:
		var body wecom.UploadChunkBody
		if err := decodeBody(f.Body, &body); err != nil {
			return fail(wecom.ErrCodeInvalidParam, "aibot_upload_media_chunk: body is not valid: %v", err), nil
		}
		u := b.uploads[body.UploadID]
		if u == nil {
			return fail(wecom.ErrCodeInvalidParam, "upload_id %s is unknown: start with aibot_upload_media_init", quote(body.UploadID)), nil
		}
		if body.ChunkIndex < 0 || body.ChunkIndex >= u.total {
			return fail(wecom.ErrCodeInvalidParam, "chunk_index %d: want 0 to %d", body.ChunkIndex, u.total-1), nil
		}
		data, err := base64.StdEncoding.DecodeString(body.Base64Data)
		if err != nil || len(data) == 0 {
			return fail(wecom.ErrCodeInvalidParam, "base64_data must be non-empty standard base64"), nil
		}
		if len(data) > wecom.MaxUploadChunkBytes {
			return fail(wecom.ErrCodeInvalidParam, "chunk is %d bytes decoded: at most %d", len(data), wecom.MaxUploadChunkBytes), nil
		}
		if u.total > wecom.UploadWindowAbove && u.inflight >= wecom.UploadWindow {
			return fail(wecom.ErrCodeInvalidParam, "chunk %d sent with %d chunks of this upload still unacked: an upload of more than %d chunks may have at most %d in flight; wait for an ack", body.ChunkIndex, u.inflight, wecom.UploadWindowAbove, wecom.UploadWindow), nil
		}
		u.chunks[body.ChunkIndex] = data
		u.inflight++
		return accepted, u
	default: // finish
		var body wecom.UploadFinishBody
		if err := decodeBody(f.Body, &body); err != nil {
			return fail(wecom.ErrCodeInvalidParam, "aibot_upload_media_finish: body is not valid: %v", err), nil
		}
		u := b.uploads[body.UploadID]
		if u == nil {
			return fail(wecom.ErrCodeInvalidParam, "upload_id %s is unknown: start with aibot_upload_media_init", quote(body.UploadID)), nil
		}
		for i := 0; i < u.total; i++ {
			if _, got := u.chunks[i]; !got {
				return fail(wecom.ErrCodeInvalidParam, "chunk %s of %d is missing: send every chunk before finishing", strconv.Itoa(i), u.total), nil
			}
		}
		h := md5.New()
		for i := 0; i < u.total; i++ {
			h.Write(u.chunks[i])
		}
		if sum := hex.EncodeToString(h.Sum(nil)); u.md5 != "" && sum != u.md5 {
			delete(b.uploads, body.UploadID)
			return fail(wecom.ErrCodeInvalidParam, "md5 %s of the chunks does not match the init's %s: upload again", sum, u.md5), nil
		}
		delete(b.uploads, body.UploadID)
		id := newID("media")
		b.media[id] = true
		if u.kind == wecom.MsgTypeImage {
			var all []byte
			for i := 0; i < u.total; i++ {
				all = append(all, u.chunks[i]...)
			}
			c.s.shown.keep(id, all)
		}
		return result{body: wecom.UploadFinishResult{MediaID: id}}, nil
	}
}
