package wecomsim

// Rules the official SDK (@wecom/aibot-node-sdk 1.0.7, test/conformance)
// showed the simulator must follow: each test here failed before its fix.

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/botctl/botctl/pkg/wecom"
	"go.uber.org/goleak"
)

// pngBytes is n bytes that start as a PNG does (the simulator checks the
// signature, not the whole image).
func pngBytes(n int) []byte {
	return append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, n)...)
}

func md5Hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

func replyImage(b []byte) wecom.ReplyMsgItem {
	return wecom.ReplyMsgItem{MsgType: wecom.MsgTypeImage, Image: &wecom.ReplyImage{Base64: base64.StdEncoding.EncodeToString(b), MD5: md5Hex(b)}}
}

// A finishing frame's msg_item images are checked as the SDK describes
// them (base64 of a JPG or PNG, md5 of its bytes) and shown by MD5; a frame
// with an image of over 1 MiB is read (the SDK allows 10 MB an image).
func TestStreamMsgItemImages(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()
	c := h.subscribe(bot1, secret1)

	reqID, _ := h.askAndReceive(c, "alice", "pictures please")
	bad := func(name string, it wecom.ReplyMsgItem) {
		t.Helper()
		body := streamBody("s-bad", "x", true)
		body.Stream.MsgItem = []wecom.ReplyMsgItem{it}
		if f := c.call(wecom.CmdRespondMsg, reqID, body); f.ErrCode != wecom.ErrCodeInvalidParam {
			t.Fatalf("%s: errcode %d (%s), want %d", name, f.ErrCode, f.ErrMsg, wecom.ErrCodeInvalidParam)
		}
	}
	wrongSum := replyImage(pngBytes(3))
	wrongSum.Image.MD5 = md5Hex([]byte("something else"))
	bad("md5 of other bytes", wrongSum)
	bad("no image", wecom.ReplyMsgItem{MsgType: wecom.MsgTypeImage})
	bad("msgtype text", wecom.ReplyMsgItem{MsgType: wecom.MsgTypeText, Image: replyImage(pngBytes(3)).Image})
	bad("a GIF", replyImage([]byte("GIF89a......")))
	notBase64 := replyImage(pngBytes(3))
	notBase64.Image.Base64 = "%%%"
	bad("not base64", notBase64)
	bad("over 10 MiB", replyImage(pngBytes(MaxReplyImageBytes)))

	jpg := append([]byte{0xff, 0xd8, 0xff, 0xe0}, bytes.Repeat([]byte{1}, 100)...)
	big := pngBytes(1536 << 10) // the frame is about 2 MiB
	upper := replyImage(jpg)
	upper.Image.MD5 = strings.ToUpper(upper.Image.MD5) // hex in either case
	done := streamBody("s1", "here", true)
	done.Stream.MsgItem = []wecom.ReplyMsgItem{upper, replyImage(big)}
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, done), 0)

	tr := h.srv.Transcript(bot1, "alice")
	e := tr[len(tr)-1]
	if e.StreamID != "s1" || !e.Finished || e.Images != 2 || len(e.ImageMD5) != 2 || e.ImageMD5[0] != md5Hex(jpg) || e.ImageMD5[1] != md5Hex(big) {
		t.Fatalf("transcript entry %+v", e)
	}
	if st := h.stats(bot1); st.Oversized != 0 {
		t.Fatalf("a 2 MiB frame was refused as oversized: %+v", st)
	}
}

// stream_with_template_card: the card may come on a later frame than the
// first (the SDK's replyStreamWithCard), once; the transcript shows it.
func TestStreamWithTemplateCardLater(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()
	c := h.subscribe(bot1, secret1)

	reqID, _ := h.askAndReceive(c, "alice", "stream, then a card")
	body := func(content string, finish bool, card string) wecom.RespondBody {
		b := streamBody("s1", content, finish)
		b.MsgType = wecom.MsgTypeStreamWithTemplateCard
		if card != "" {
			b.TemplateCard = json.RawMessage(card)
		}
		return b
	}
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, body("working", false, "")), 0)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, body("working more", false, `{"card_type":"text_notice","task_id":"t1"}`)), 0)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, body("again", false, `{"card_type":"text_notice","task_id":"t2"}`)), wecom.ErrCodeInvalidParam)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, body("done", true, "")), 0)

	tr := h.srv.Transcript(bot1, "alice")
	e := tr[len(tr)-1]
	if e.Kind != wecom.MsgTypeStreamWithTemplateCard || e.Content != "done" || !e.Finished || e.Card != `{"card_type":"text_notice","task_id":"t1"}` {
		t.Fatalf("transcript entry %+v", e)
	}
}

// An upload is reassembled in chunk_index order whatever order its chunks
// came in (the SDK sends two or three at a time), checked against init's
// total_size and md5, and acked with type, media_id and created_at (the
// SDK's UploadMediaFinishResult). A reply or push of its media_id shows it.
func TestUploadReassembledAndShown(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()
	c := h.subscribe(bot1, secret1)

	data := []byte("first ten.second ten.third ten.")[:30]
	upload := func(declaredSize int64, declaredMD5 string, chunks ...[]byte) wecom.Frame {
		t.Helper()
		a := c.call(wecom.CmdUploadMediaInit, "", wecom.UploadInitBody{Type: "file", Filename: "r.txt", TotalSize: declaredSize, TotalChunks: len(chunks), MD5: declaredMD5})
		wantCode(t, a, 0)
		var init wecom.UploadInitResult
		if err := json.Unmarshal(a.Body, &init); err != nil {
			t.Fatal(err)
		}
		for i := len(chunks) - 1; i >= 0; i-- { // last chunk first
			wantCode(t, c.call(wecom.CmdUploadMediaChunk, "", wecom.UploadChunkBody{UploadID: init.UploadID, ChunkIndex: i, Base64Data: base64.StdEncoding.EncodeToString(chunks[i])}), 0)
		}
		return c.call(wecom.CmdUploadMediaFinish, "", wecom.UploadFinishBody(init))
	}
	wantCode(t, upload(31, md5Hex(data), data[:10], data[10:20], data[20:]), wecom.ErrCodeInvalidParam)            // size
	wantCode(t, upload(30, md5Hex(data), data[10:20], data[:10], data[20:]), wecom.ErrCodeInvalidParam)            // order
	wantCode(t, upload(30, md5Hex([]byte("other")), data[:10], data[10:20], data[20:]), wecom.ErrCodeInvalidParam) // md5
	f := upload(30, md5Hex(data), data[:10], data[10:20], data[20:])
	wantCode(t, f, 0)
	var fin struct {
		Type      string `json:"type"`
		MediaID   string `json:"media_id"`
		CreatedAt string `json:"created_at"`
	}
	if err := json.Unmarshal(f.Body, &fin); err != nil || fin.Type != "file" || fin.MediaID == "" || fin.CreatedAt != strconv.FormatInt(h.clock.Now().Unix(), 10) {
		t.Fatalf("finish ack body %s", f.Body)
	}

	reqID, _ := h.askAndReceive(c, "alice", "the report please")
	ref := map[string]string{"media_id": fin.MediaID}
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, map[string]any{"msgtype": "file", "file": ref}), 0)
	wantCode(t, c.call(wecom.CmdSendMsg, "", map[string]any{"chatid": "alice", "msgtype": "file", "file": ref}), 0)
	want := UploadInfo{MediaID: fin.MediaID, Type: "file", Filename: "r.txt", Size: 30, MD5: md5Hex(data)}
	tr := h.srv.Transcript(bot1, "alice")
	for _, e := range tr[len(tr)-2:] {
		if e.Content != fin.MediaID || e.Upload == nil || *e.Upload != want {
			t.Fatalf("transcript entry %+v, upload %+v, want %+v", e, e.Upload, want)
		}
	}
}

// A card update must carry the clicked card's task_id (the SDK's
// updateTemplateCard); the transcript shows the users it is for.
func TestUpdateTemplateCardTaskID(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()
	c := h.subscribe(bot1, secret1)

	h.event(EventRequest{BotID: bot1, UserID: "bob", EventType: wecom.EventTemplateCardEvent, EventKey: "yes", TaskID: "t1"})
	reqID, _ := c.eventCallback()
	update := func(card string, users ...string) wecom.UpdateBody {
		return wecom.UpdateBody{ResponseType: wecom.ResponseTypeUpdateTemplateCard, UserIDs: users, TemplateCard: json.RawMessage(card)}
	}
	wantCode(t, c.call(wecom.CmdRespondUpdateMsg, reqID, update(`{"card_type":"text_notice","task_id":"t2"}`)), wecom.ErrCodeInvalidParam)
	wantCode(t, c.call(wecom.CmdRespondUpdateMsg, reqID, update(`{"card_type":"text_notice"}`)), wecom.ErrCodeInvalidParam)
	wantCode(t, c.call(wecom.CmdRespondUpdateMsg, reqID, update(`{"card_type":"text_notice","task_id":"t1"}`, "bob")), 0)
	tr := h.srv.Transcript(bot1, "bob")
	if e := tr[len(tr)-1]; e.Kind != wecom.ResponseTypeUpdateTemplateCard || len(e.UserIDs) != 1 || e.UserIDs[0] != "bob" {
		t.Fatalf("transcript entry %+v", e)
	}
}
