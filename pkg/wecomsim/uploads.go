package wecomsim

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/botctl/botctl/pkg/wecom"
)

// UploadInfo is what a bot uploaded (aibot_upload_media_*): the transcript
// shows it on the reply or push that sends the media_id, so a test sees the
// bytes arrived whole.
type UploadInfo struct {
	MediaID  string `json:"media_id"`
	Type     string `json:"type"` // image, file, voice or video
	Filename string `json:"filename"`
	Size     int64  `json:"size"` // the reassembled bytes
	MD5      string `json:"md5"`  // of the reassembled bytes, lowercase hex
}

// upload is an upload in progress: its chunks are kept until finish, which
// reassembles them in chunk_index order (the official SDK sends chunks
// concurrently, so they arrive in any order).
type upload struct {
	info   UploadInfo
	total  int
	md5    string         // what init declared ("" if nothing)
	chunks map[int][]byte // chunk_index → decoded bytes
	// inflight counts the chunks accepted whose acks are not written
	// yet: a client that waits for acks never has more in flight than
	// this shows (wecom.UploadWindow above wecom.UploadWindowAbove
	// chunks); one that does not is caught when acks are slow.
	inflight int
}

// uploadFinishAck is the body of the ack to aibot_upload_media_finish, as
// the official SDK reads it (UploadMediaFinishResult: type, media_id,
// created_at).
type uploadFinishAck struct {
	Type      string `json:"type"`
	MediaID   string `json:"media_id"`
	CreatedAt string `json:"created_at"`
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
func checkMedia(b *bot, msgType string, raw json.RawMessage) (*UploadInfo, result, bool) {
	var m mediaRef
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fail(wecom.ErrCodeInvalidParam, "body is not valid: %v", err), false
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
		return nil, fail(wecom.ErrCodeInvalidParam, "%s.media_id is required: upload the media first", msgType), false
	}
	info := b.media[id]
	if info == nil {
		return nil, fail(wecom.ErrCodeInvalidParam, "%s.media_id %s is unknown: finish an upload first", msgType, quote(id)), false
	}
	return info, accepted, true
}

func (c *conn) upload(b *bot, f *wecom.Frame) {
	b.mu.Lock()
	r, u := c.uploadLocked(b, f)
	b.mu.Unlock()
	var written frameWritten
	if u != nil { // a chunk accepted: in flight until its ack is written
		written = chunkAcked{b: b, u: u}
	}
	c.ackFor(c.bot, f.Headers.ReqID, r.code, r.msg, r.body, written)
}

// chunkAcked is a chunk's ack: once written, the chunk is no longer in
// flight.
type chunkAcked struct {
	b *bot
	u *upload
}

func (a chunkAcked) written() {
	a.b.mu.Lock()
	a.u.inflight--
	a.b.mu.Unlock()
}

// uploadLocked is an upload command's verdict, and the upload a chunk
// accepted belongs to (nil otherwise). Call with b.mu held.
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
		b.uploads[id] = &upload{
			info:  UploadInfo{Type: body.Type, Filename: body.Filename, Size: body.TotalSize},
			total: body.TotalChunks, md5: strings.ToLower(body.MD5), chunks: make(map[int][]byte),
		}
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
		// The official SDK numbers chunks from 0 (its type's comment says
		// "从 1 开始", its code sends chunkIndex 0..n-1): the code is what
		// WeCom accepts.
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
		u.chunks[body.ChunkIndex] = data // a retried chunk replaces the first
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
		return c.finishUpload(b, body.UploadID, u), nil
	}
}

// finishUpload reassembles an upload and checks it against what init
// declared: every chunk, total_size, and md5 when init sent one (the
// official SDK always does). A refused finish keeps the upload, so the bot
// may send what is missing and finish again. Call with b.mu held.
func (c *conn) finishUpload(b *bot, uploadID string, u *upload) result {
	sum := md5.New()
	var size int64
	for i := 0; i < u.total; i++ {
		data, got := u.chunks[i]
		if !got {
			return fail(wecom.ErrCodeInvalidParam, "chunk %s of %d is missing: send every chunk before finishing", strconv.Itoa(i), u.total)
		}
		size += int64(len(data))
		sum.Write(data)
	}
	if size != u.info.Size {
		return fail(wecom.ErrCodeInvalidParam, "the chunks hold %d bytes, init declared total_size %d", size, u.info.Size)
	}
	got := hex.EncodeToString(sum.Sum(nil))
	if u.md5 != "" && u.md5 != got {
		return fail(wecom.ErrCodeInvalidParam, "the chunks' md5 is %s, init declared %s: a chunk was corrupted or misplaced", got, u.md5)
	}
	delete(b.uploads, uploadID)
	info := u.info
	info.MediaID = newID("media")
	info.MD5 = got
	b.media[info.MediaID] = &info
	if info.Type == wecom.MsgTypeImage { // shown at /control/images
		all := make([]byte, 0, size)
		for i := 0; i < u.total; i++ {
			all = append(all, u.chunks[i]...)
		}
		c.s.shown.keep(info.MediaID, all)
	}
	return result{body: uploadFinishAck{Type: info.Type, MediaID: info.MediaID, CreatedAt: strconv.FormatInt(c.s.now().Unix(), 10)}}
}
