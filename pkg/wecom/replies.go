package wecom

import (
	"context"
	"fmt"
	"unicode/utf8"
)

// Reply sends aibot_respond_msg on a callback's req_id.
func (c *Conn) Reply(ctx context.Context, reqID string, body *RespondBody) error {
	if body.Stream != nil {
		if err := CheckStream(body.Stream); err != nil {
			return err
		}
	}
	_, err := c.Do(ctx, CmdRespondMsg, reqID, body)
	return err
}

// ReplyStream sends one frame of a streamed reply. Content is the whole
// text so far.
func (c *Conn) ReplyStream(ctx context.Context, reqID string, s Stream) error {
	return c.Reply(ctx, reqID, &RespondBody{MsgType: MsgTypeStream, Stream: &s})
}

// SendStream writes one frame of a streamed reply without waiting for its
// ack (Send): the caller must Wait for it.
func (c *Conn) SendStream(ctx context.Context, reqID string, s Stream) (*Pending, error) {
	if err := CheckStream(&s); err != nil {
		return nil, err
	}
	return c.Send(ctx, CmdRespondMsg, reqID, &RespondBody{MsgType: MsgTypeStream, Stream: &s})
}

// ReplyWelcome answers an enter_chat event (within 5 s of it).
func (c *Conn) ReplyWelcome(ctx context.Context, reqID string, body *WelcomeBody) error {
	if body.Text != nil {
		if err := CheckContent(body.Text.Content); err != nil {
			return err
		}
	}
	_, err := c.Do(ctx, CmdRespondWelcomeMsg, reqID, body)
	return err
}

// ReplyVersion answers an enter_check_update event with the version the
// bot reports.
func (c *Conn) ReplyVersion(ctx context.Context, reqID, version string) error {
	if version == "" {
		return fmt.Errorf("%w: ww_ai_robot_enter_event without a version", ErrInvalidFrame)
	}
	_, err := c.Do(ctx, CmdEnterEventReply, reqID, &EnterEventBody{Version: version})
	return err
}

// UpdateTemplateCard answers a template_card_event (within 5 s of it).
func (c *Conn) UpdateTemplateCard(ctx context.Context, reqID string, body *UpdateBody) error {
	_, err := c.Do(ctx, CmdRespondUpdateMsg, reqID, body)
	return err
}

// SendMessage is a proactive push (aibot_send_msg) on a new req_id.
func (c *Conn) SendMessage(ctx context.Context, body *SendMsgBody) error {
	if body.ChatID == "" {
		return fmt.Errorf("%w: aibot_send_msg without chatid", ErrInvalidFrame)
	}
	if body.Markdown != nil {
		if err := CheckContent(body.Markdown.Content); err != nil {
			return err
		}
	}
	_, err := c.Do(ctx, CmdSendMsg, NewReqID(CmdSendMsg), body)
	return err
}

// SendMarkdown pushes markdown to a chat (chatType 0 lets WeCom infer it).
func (c *Conn) SendMarkdown(ctx context.Context, chatID string, chatType int, content string) error {
	return c.SendMessage(ctx, &SendMsgBody{ChatID: chatID, ChatType: chatType, MsgType: MsgTypeMarkdown, Markdown: &TextContent{Content: content}})
}

// CheckContent enforces the content limit before a frame is sent.
func CheckContent(s string) error {
	if len(s) > MaxContentBytes {
		return fmt.Errorf("%w: %d bytes, limit %d (split the text, e.g. at paragraph boundaries)", ErrContentTooLarge, len(s), MaxContentBytes)
	}
	if !utf8.ValidString(s) {
		return ErrInvalidUTF8
	}
	return nil
}

// CheckStream enforces the stream rules the client can know by itself.
func CheckStream(s *Stream) error {
	if s.ID == "" {
		return fmt.Errorf("%w: stream without id", ErrInvalidFrame)
	}
	if len(s.MsgItem) > 0 && !s.Finish {
		return fmt.Errorf("%w: msg_item is allowed only on the finishing frame", ErrInvalidFrame)
	}
	if len(s.MsgItem) > MaxMsgItems {
		return fmt.Errorf("%w: %d msg_items, limit %d", ErrInvalidFrame, len(s.MsgItem), MaxMsgItems)
	}
	if s.Feedback != nil && (s.Feedback.ID == "" || len(s.Feedback.ID) > MaxFeedbackIDBytes || !utf8.ValidString(s.Feedback.ID)) {
		return fmt.Errorf("%w: feedback.id of %d bytes: want 1 to %d bytes of UTF-8", ErrInvalidFrame, len(s.Feedback.ID), MaxFeedbackIDBytes)
	}
	return CheckContent(s.Content)
}
