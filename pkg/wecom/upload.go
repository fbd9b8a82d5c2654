package wecom

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// UploadWindow is how many chunks of an upload of more than
// UploadWindowAbove chunks may be in flight (sent, not yet acked) at
// once; a smaller upload sends every chunk without waiting. WeCom's rule,
// as the official SDK keeps it ("分片数超过 10 时最多 2 个并发").
const (
	UploadWindow      = 2
	UploadWindowAbove = 10
)

// Upload sends data as a chunked media upload (aibot_upload_media_init,
// _chunk, _finish: chunks of MaxUploadChunkBytes, at most MaxUploadChunks,
// the md5 of the whole) and returns the media_id WeCom gives it, valid
// for three days. kind is MsgTypeImage, MsgTypeFile, MsgTypeVoice or
// MsgTypeVideo.
func (c *Conn) Upload(ctx context.Context, kind, filename string, data []byte) (string, error) {
	total := (len(data) + MaxUploadChunkBytes - 1) / MaxUploadChunkBytes
	switch {
	case len(data) == 0:
		return "", fmt.Errorf("%w: upload of %q: no bytes", ErrInvalidFrame, filename)
	case total > MaxUploadChunks:
		return "", fmt.Errorf("%w: upload of %q: %d bytes is %d chunks of %d, limit %d", ErrInvalidFrame, filename, len(data), total, MaxUploadChunkBytes, MaxUploadChunks)
	}
	sum := md5.Sum(data)
	f, err := c.Do(ctx, CmdUploadMediaInit, NewReqID(CmdUploadMediaInit), &UploadInitBody{
		Type: kind, Filename: filename, TotalSize: int64(len(data)), TotalChunks: total, MD5: hex.EncodeToString(sum[:]),
	})
	if err != nil {
		return "", err
	}
	var init UploadInitResult
	if err := json.Unmarshal(f.Body, &init); err != nil || init.UploadID == "" {
		return "", fmt.Errorf("%w: aibot_upload_media_init ack without upload_id", ErrInvalidFrame)
	}
	window := total
	if total > UploadWindowAbove {
		window = UploadWindow
	}
	var flight []*Pending
	wait := func() error {
		p := flight[0]
		flight = flight[1:]
		_, err := p.Wait(ctx)
		return err
	}
	for i := 0; i < total; i++ {
		for len(flight) >= window {
			if err := wait(); err != nil {
				return "", c.dropFlight(ctx, flight, err)
			}
		}
		chunk := data[i*MaxUploadChunkBytes : min((i+1)*MaxUploadChunkBytes, len(data))]
		p, err := c.Send(ctx, CmdUploadMediaChunk, NewReqID(CmdUploadMediaChunk), &UploadChunkBody{
			UploadID: init.UploadID, ChunkIndex: i, Base64Data: base64.StdEncoding.EncodeToString(chunk),
		})
		if err != nil {
			return "", c.dropFlight(ctx, flight, err)
		}
		flight = append(flight, p)
	}
	for len(flight) > 0 {
		if err := wait(); err != nil {
			return "", c.dropFlight(ctx, flight, err)
		}
	}
	f, err = c.Do(ctx, CmdUploadMediaFinish, NewReqID(CmdUploadMediaFinish), &UploadFinishBody{UploadID: init.UploadID})
	if err != nil {
		return "", err
	}
	var fin UploadFinishResult
	if err := json.Unmarshal(f.Body, &fin); err != nil || fin.MediaID == "" {
		return "", fmt.Errorf("%w: aibot_upload_media_finish ack without media_id", ErrInvalidFrame)
	}
	return fin.MediaID, nil
}

// dropFlight waits out the chunks still in flight (their turns are
// theirs until acked) and returns err.
func (c *Conn) dropFlight(ctx context.Context, flight []*Pending, err error) error {
	for _, p := range flight {
		p.Wait(ctx)
	}
	return err
}

// MediaRef names an uploaded media in a message.
type MediaRef struct {
	MediaID string `json:"media_id"`
}

// SendMedia pushes uploaded media (aibot_send_msg, msgtype kind) to a
// chat (chatType 0 lets WeCom infer it).
func (c *Conn) SendMedia(ctx context.Context, chatID string, chatType int, kind, mediaID string) error {
	if chatID == "" {
		return fmt.Errorf("%w: aibot_send_msg without chatid", ErrInvalidFrame)
	}
	body := map[string]any{"chatid": chatID, "msgtype": kind, kind: MediaRef{MediaID: mediaID}}
	if chatType != 0 {
		body["chat_type"] = chatType
	}
	_, err := c.Do(ctx, CmdSendMsg, NewReqID(CmdSendMsg), body)
	return err
}

// SendTemplateCard pushes a template card to a chat.
func (c *Conn) SendTemplateCard(ctx context.Context, chatID string, chatType int, card json.RawMessage) error {
	return c.SendMessage(ctx, &SendMsgBody{ChatID: chatID, ChatType: chatType, MsgType: MsgTypeTemplateCard, TemplateCard: card})
}

// ReplyImages is msg_item for a finishing stream frame: each image's
// base64 and the md5 of its bytes.
func ReplyImages(images ...[]byte) []ReplyMsgItem {
	items := make([]ReplyMsgItem, 0, len(images))
	for _, b := range images {
		sum := md5.Sum(b)
		items = append(items, ReplyMsgItem{MsgType: MsgTypeImage, Image: &ReplyImage{
			Base64: base64.StdEncoding.EncodeToString(b), MD5: hex.EncodeToString(sum[:])}})
	}
	return items
}
