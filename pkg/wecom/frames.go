package wecom

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Commands. Client → server commands first, then server → client callbacks.
const (
	CmdSubscribe         = "aibot_subscribe"
	CmdPing              = "ping"
	CmdRespondMsg        = "aibot_respond_msg"
	CmdRespondWelcomeMsg = "aibot_respond_welcome_msg"
	CmdRespondUpdateMsg  = "aibot_respond_update_msg"
	// CmdEnterEventReply answers enter_check_update with the version the
	// bot reports (the official plugin's reply; same req_id as the event).
	CmdEnterEventReply   = "ww_ai_robot_enter_event"
	CmdSendMsg           = "aibot_send_msg"
	CmdUploadMediaInit   = "aibot_upload_media_init"
	CmdUploadMediaChunk  = "aibot_upload_media_chunk"
	CmdUploadMediaFinish = "aibot_upload_media_finish"

	CmdMsgCallback   = "aibot_msg_callback"
	CmdEventCallback = "aibot_event_callback"
)

// Event types carried by aibot_event_callback.
const (
	EventEnterChat         = "enter_chat"
	EventTemplateCardEvent = "template_card_event"
	EventFeedback          = "feedback_event"
	EventDisconnected      = "disconnected_event"
	// EventEnterCheckUpdate asks the bot for its version: answered with
	// CmdEnterEventReply.
	EventEnterCheckUpdate = "enter_check_update"
)

// Message types of aibot_msg_callback and of reply bodies.
const (
	MsgTypeText                   = "text"
	MsgTypeImage                  = "image"
	MsgTypeMixed                  = "mixed"
	MsgTypeVoice                  = "voice"
	MsgTypeFile                   = "file"
	MsgTypeVideo                  = "video"
	MsgTypeEvent                  = "event"
	MsgTypeStream                 = "stream"
	MsgTypeMarkdown               = "markdown"
	MsgTypeTemplateCard           = "template_card"
	MsgTypeStreamWithTemplateCard = "stream_with_template_card"
)

// Chat types as callbacks name them, and as aibot_send_msg numbers them.
const (
	ChatSingle = "single"
	ChatGroup  = "group"

	ChatTypeSingle = 1
	ChatTypeGroup  = 2
)

// Errcodes. Those marked assumed are not documented publicly; the simulator
// uses them and the bot side treats them by name, never by number.
const (
	ErrCodeOK = 0

	// ErrCodeSystemBusy: WeCom's global "系统繁忙" (system busy), retry later.
	// Note ErrCodeOf also returns -1 for an error that is not an ack.
	ErrCodeSystemBusy = -1
	// ErrCodeCommandConflict: "命令冲突"; one integration retries it.
	ErrCodeCommandConflict = 6000
	// ErrCodeInvalidCredential: subscribe with a wrong or revoked secret (assumed number).
	ErrCodeInvalidCredential = 40001
	// ErrCodeInvalidMsgType: e.g. aibot_send_msg with msgtype "text".
	ErrCodeInvalidMsgType = 40008
	// ErrCodeInvalidParam: malformed frame, missing field, unknown cmd (assumed).
	ErrCodeInvalidParam = 40058
	// ErrCodeContentTooLong: content over the 20,480-byte limit (assumed).
	ErrCodeContentTooLong = 40060
	// ErrCodeRateLimited: per-conversation quota exceeded (assumed, WeCom's usual code).
	ErrCodeRateLimited = 45009
	// ErrCodeTransient1/2: seen in the wild, meaning unknown, treated as transient.
	ErrCodeTransient1 = 846601
	ErrCodeTransient2 = 846602
	// ErrCodeChatNotFound: aibot_send_msg to a chat that never talked to the bot (assumed).
	ErrCodeChatNotFound = 846604
	// ErrCodeInvalidReqID: unknown req_id, or one received on another connection.
	ErrCodeInvalidReqID = 846605
	// ErrCodeStreamExpired: stream update or finish after the stream's window.
	ErrCodeStreamExpired = 846608
	// ErrCodeNotSubscribed: a reply on a connection that is not (or no longer) subscribed.
	ErrCodeNotSubscribed = 846609
	// ErrCodeDeviceUnsupported: "device type not supported", a stream frame
	// to a user whose WeCom client cannot show streams; a markdown push
	// reaches them (issue 26 cites integrations that fall back so).
	ErrCodeDeviceUnsupported = 600039
)

// Limits.
const (
	// MaxContentBytes is the largest stream or markdown content, in UTF-8 bytes.
	MaxContentBytes = 20480
	// MaxFeedbackIDBytes is the longest stream feedback.id (the official
	// SDK's ReplyFeedback: "有效长度为 256 字节以内").
	MaxFeedbackIDBytes = 256
	// MaxFrameBytes is the largest frame either side accepts (assumed: a
	// 512 KB media chunk, base64-encoded, must fit).
	MaxFrameBytes = 1 << 20
	// MaxMsgItems is the largest number of images on a finishing stream frame.
	MaxMsgItems = 10
)

// Headers is every frame's header block.
type Headers struct {
	ReqID string `json:"req_id"`
}

// Frame is the envelope of every frame in both directions. A frame without
// Cmd is an ack: the server's answer to a client frame with the same req_id.
type Frame struct {
	Cmd     string          `json:"cmd,omitempty"`
	Headers Headers         `json:"headers"`
	Body    json.RawMessage `json:"body,omitempty"`
	ErrCode int             `json:"errcode,omitempty"`
	ErrMsg  string          `json:"errmsg,omitempty"`
}

// IsAck reports whether f is the server's answer to a client frame.
func (f *Frame) IsAck() bool { return f.Cmd == "" }

// Ack is how the server encodes an ack: errcode and errmsg always present.
type Ack struct {
	Headers Headers         `json:"headers"`
	ErrCode int             `json:"errcode"`
	ErrMsg  string          `json:"errmsg"`
	Body    json.RawMessage `json:"body,omitempty"`
}

// SubscribeBody authenticates a connection; it must be the first frame.
type SubscribeBody struct {
	BotID  string `json:"bot_id"`
	Secret string `json:"secret"`
}

// From names the user behind a callback.
type From struct {
	UserID string `json:"userid"`
	CorpID string `json:"corpid,omitempty"`
}

// TextContent is a text, voice transcription or markdown payload.
type TextContent struct {
	Content string `json:"content"`
}

// MediaContent is an image, file or video: an encrypted URL valid for about
// five minutes, with its per-message key.
type MediaContent struct {
	URL    string `json:"url"`
	AESKey string `json:"aeskey,omitempty"`
}

// MixedItem is one part of a mixed text-and-image message.
type MixedItem struct {
	MsgType string        `json:"msgtype"`
	Text    *TextContent  `json:"text,omitempty"`
	Image   *MediaContent `json:"image,omitempty"`
}

// MixedContent is the body of a mixed message.
type MixedContent struct {
	MsgItem []MixedItem `json:"msg_item"`
}

// Quote is the message a user quoted.
type Quote struct {
	MsgType string        `json:"msgtype"`
	Text    *TextContent  `json:"text,omitempty"`
	Image   *MediaContent `json:"image,omitempty"`
	Mixed   *MixedContent `json:"mixed,omitempty"`
	Voice   *TextContent  `json:"voice,omitempty"`
	File    *MediaContent `json:"file,omitempty"`
}

// MsgCallback is the body of aibot_msg_callback.
type MsgCallback struct {
	MsgID       string        `json:"msgid"`
	AIBotID     string        `json:"aibotid"`
	ChatID      string        `json:"chatid,omitempty"`
	ChatType    string        `json:"chattype"`
	From        From          `json:"from"`
	CreateTime  int64         `json:"create_time,omitempty"`
	MsgType     string        `json:"msgtype"`
	Text        *TextContent  `json:"text,omitempty"`
	Image       *MediaContent `json:"image,omitempty"`
	Mixed       *MixedContent `json:"mixed,omitempty"`
	Voice       *TextContent  `json:"voice,omitempty"`
	File        *MediaContent `json:"file,omitempty"`
	Video       *MediaContent `json:"video,omitempty"`
	Quote       *Quote        `json:"quote,omitempty"`
	ResponseURL string        `json:"response_url,omitempty"`
}

// Conversation is the chat a callback belongs to: the group chat id for
// groups, the user id for single chats. It is also aibot_send_msg's chatid.
func (m *MsgCallback) Conversation() string {
	if m.ChatType == ChatGroup && m.ChatID != "" {
		return m.ChatID
	}
	return m.From.UserID
}

// PlainText is the text a user typed or said: text content, a voice
// transcription, or the text parts of a mixed message joined by newlines.
func (m *MsgCallback) PlainText() string {
	switch m.MsgType {
	case MsgTypeText:
		if m.Text != nil {
			return m.Text.Content
		}
	case MsgTypeVoice:
		if m.Voice != nil {
			return m.Voice.Content
		}
	case MsgTypeMixed:
		if m.Mixed != nil {
			var parts []string
			for _, it := range m.Mixed.MsgItem {
				if it.MsgType == MsgTypeText && it.Text != nil {
					parts = append(parts, it.Text.Content)
				}
			}
			return strings.Join(parts, "\n")
		}
	}
	return ""
}

// Event is the event part of aibot_event_callback.
type Event struct {
	EventType string `json:"eventtype"`
	// EventKey and TaskID are a template_card_event's button key and
	// card task_id. WeCom sends them inside event.template_card_event
	// (TemplateCard); reading a frame fills them from there, and from the
	// event's top level when a frame has them there (cardevent.go).
	EventKey string `json:"event_key,omitempty"`
	TaskID   string `json:"task_id,omitempty"`
	// TemplateCard is a template_card_event's click: the card's type, the
	// button, the card and the options chosen (cardevent.go).
	TemplateCard *TemplateCardEvent `json:"template_card_event,omitempty"`
	// Feedback is a feedback_event's verdict (event.feedback_event).
	Feedback *FeedbackEvent `json:"feedback_event,omitempty"`
}

// FeedbackEvent is a user's verdict on a reply whose first frame carried
// a feedback.id (event feedback_event). The official SDK 1.0.7 types only
// the eventtype; the fields are WeCom's callback documentation's, as
// integrations parse them.
type FeedbackEvent struct {
	// ID is the reply's feedback.id.
	ID string `json:"id"`
	// Type is FeedbackAccurate, FeedbackInaccurate or FeedbackCanceled.
	Type int `json:"type"`
	// Content is what the user wrote (with an inaccurate verdict).
	Content string `json:"content,omitempty"`
	// InaccurateReasons are the reasons ticked (codes: 1 unrelated to the
	// question, 2 incomplete, 3 wrong, 4 wrong data analysis, as
	// integrations read them).
	InaccurateReasons []int `json:"inaccurate_reason_list,omitempty"`
}

// FeedbackEvent.Type values.
const (
	FeedbackAccurate   = 1 // thumbs up
	FeedbackInaccurate = 2 // thumbs down
	FeedbackCanceled   = 3 // the verdict withdrawn
)

// EventCallback is the body of aibot_event_callback.
type EventCallback struct {
	MsgID      string `json:"msgid"`
	CreateTime int64  `json:"create_time,omitempty"`
	AIBotID    string `json:"aibotid"`
	ChatID     string `json:"chatid,omitempty"`
	ChatType   string `json:"chattype,omitempty"`
	From       From   `json:"from"`
	MsgType    string `json:"msgtype"`
	Event      Event  `json:"event"`
}

// ReplyImage is an image attached to a finishing stream frame.
type ReplyImage struct {
	Base64 string `json:"base64"`
	MD5    string `json:"md5"`
}

// ReplyMsgItem is one item of a finishing stream frame's msg_item.
type ReplyMsgItem struct {
	MsgType string      `json:"msgtype"`
	Image   *ReplyImage `json:"image,omitempty"`
}

// Feedback asks WeCom to collect thumbs up/down for a reply (first frame only).
type Feedback struct {
	ID string `json:"id"`
}

// Stream is a streamed reply. Content is the whole text so far: each frame
// replaces what the user sees.
type Stream struct {
	ID       string         `json:"id"`
	Finish   bool           `json:"finish"`
	Content  string         `json:"content"`
	MsgItem  []ReplyMsgItem `json:"msg_item,omitempty"`
	Feedback *Feedback      `json:"feedback,omitempty"`
}

// RespondBody is the body of aibot_respond_msg: a stream, a template card,
// or both.
type RespondBody struct {
	MsgType      string          `json:"msgtype"`
	Stream       *Stream         `json:"stream,omitempty"`
	TemplateCard json.RawMessage `json:"template_card,omitempty"`
}

// EnterEventBody is the body of ww_ai_robot_enter_event: the version the
// bot reports when WeCom asks (enter_check_update).
type EnterEventBody struct {
	Version string `json:"version"`
}

// WelcomeBody is the body of aibot_respond_welcome_msg (text or template card).
type WelcomeBody struct {
	MsgType      string          `json:"msgtype"`
	Text         *TextContent    `json:"text,omitempty"`
	TemplateCard json.RawMessage `json:"template_card,omitempty"`
}

// UpdateBody is the body of aibot_respond_update_msg.
type UpdateBody struct {
	ResponseType string          `json:"response_type"`
	UserIDs      []string        `json:"userids,omitempty"`
	TemplateCard json.RawMessage `json:"template_card"`
}

// ResponseTypeUpdateTemplateCard is UpdateBody's only response type.
const ResponseTypeUpdateTemplateCard = "update_template_card"

// SendMsgBody is the body of aibot_send_msg, a proactive push. ChatType may
// be omitted (0); the server then infers it from the chat.
type SendMsgBody struct {
	ChatID       string          `json:"chatid"`
	ChatType     int             `json:"chat_type,omitempty"`
	MsgType      string          `json:"msgtype"`
	Markdown     *TextContent    `json:"markdown,omitempty"`
	Text         *TextContent    `json:"text,omitempty"`
	TemplateCard json.RawMessage `json:"template_card,omitempty"`
}

// UploadInitBody starts a chunked media upload.
type UploadInitBody struct {
	Type        string `json:"type"`
	Filename    string `json:"filename"`
	TotalSize   int64  `json:"total_size"`
	TotalChunks int    `json:"total_chunks"`
	MD5         string `json:"md5"`
}

// UploadChunkBody carries one chunk (≤512 KB before base64).
type UploadChunkBody struct {
	UploadID   string `json:"upload_id"`
	ChunkIndex int    `json:"chunk_index"`
	Base64Data string `json:"base64_data"`
}

// UploadFinishBody completes an upload.
type UploadFinishBody struct {
	UploadID string `json:"upload_id"`
}

// UploadInitResult is the body of the ack to aibot_upload_media_init.
type UploadInitResult struct {
	UploadID string `json:"upload_id"`
}

// UploadFinishResult is the body of the ack to aibot_upload_media_finish.
type UploadFinishResult struct {
	MediaID string `json:"media_id"`
}

// Upload limits.
const (
	MaxUploadChunkBytes = 512 * 1024
	MaxUploadChunks     = 100
)

// NewReqID makes a req_id as the official SDK does: <cmd>_<unix ms>_<random>.
func NewReqID(cmd string) string {
	return cmd + "_" + strconv.FormatInt(time.Now().UnixMilli(), 10) + "_" + randomHex(8)
}

// AckError is an ack with errcode ≠ 0.
type AckError struct {
	Cmd     string
	ReqID   string
	ErrCode int
	ErrMsg  string
}

func (e *AckError) Error() string {
	return fmt.Sprintf("wecom %s (req_id %s): errcode %d: %s", e.Cmd, e.ReqID, e.ErrCode, e.ErrMsg)
}

// ErrCodeOf returns the errcode carried by err (an *AckError anywhere in its
// chain), or -1 when err is not an ack error (-1 is also ErrCodeSystemBusy:
// use IsConnectionError, or errors.As for the *AckError, to tell them apart).
func ErrCodeOf(err error) int {
	var ae *AckError
	if asAckError(err, &ae) {
		return ae.ErrCode
	}
	return -1
}

// encodeFrame is a frame as written to the socket, refused locally when
// over MaxFrameBytes.
func encodeFrame(cmd, reqID string, body any) ([]byte, error) {
	f := struct {
		Cmd     string  `json:"cmd"`
		Headers Headers `json:"headers"`
		Body    any     `json:"body,omitempty"`
	}{cmd, Headers{ReqID: reqID}, body}
	raw, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("wecom: encode %s: %w", cmd, err)
	}
	if len(raw) > MaxFrameBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, limit %d", ErrFrameTooLarge, cmd, len(raw), MaxFrameBytes)
	}
	return raw, nil
}
