package wecomsim

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"image"
	"image/png"
	"testing"

	"github.com/botctl/botctl/pkg/wecom"
	"go.uber.org/goleak"
)

// testPNG is a small valid PNG.
var testPNG = func() []byte {
	var b bytes.Buffer
	_ = png.Encode(&b, image.NewGray(image.Rect(0, 0, 4, 4)))
	return b.Bytes()
}()

// The finishing frame's images are checked as WeCom's SDK describes
// them: base64 of a JPG or PNG of at most 10 MB, with its md5.
func TestFinishingFrameImagesChecked(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()
	c := h.subscribe(bot1, secret1)
	reqID, _ := h.askAndReceive(c, "alice", "hi")
	gif := []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;")
	badMD5 := wecom.ReplyImages(testPNG)
	badMD5[0].Image.MD5 = "00000000000000000000000000000000"
	big := append(append([]byte{}, testPNG...), make([]byte, 10<<20)...)
	for name, items := range map[string][]wecom.ReplyMsgItem{
		"gif":          wecom.ReplyImages(gif),
		"md5":          badMD5,
		"over 10 MB":   wecom.ReplyImages(big),
		"not base64":   {{MsgType: "image", Image: &wecom.ReplyImage{Base64: "%%%", MD5: "x"}}},
		"not an image": {{MsgType: "text"}},
	} {
		f := streamBody("s1", "done", true)
		f.Stream.MsgItem = items
		raw, _ := json.Marshal(f)
		if len(raw) > wecom.MaxFrameBytes { // refused by the frame's size, not tested here
			continue
		}
		if a := c.call(wecom.CmdRespondMsg, reqID, f); a.ErrCode != wecom.ErrCodeInvalidParam {
			t.Errorf("%s: errcode %d (%s), want %d", name, a.ErrCode, a.ErrMsg, wecom.ErrCodeInvalidParam)
		}
	}
	ok := streamBody("s1", "done", true)
	ok.Stream.MsgItem = wecom.ReplyImages(testPNG, testPNG)
	wantCode(t, c.call(wecom.CmdRespondMsg, reqID, ok), 0)
	if tr := h.srv.Transcript(bot1, "alice"); len(tr) != 2 || tr[1].Images != 2 || !tr[1].Finished {
		t.Fatalf("transcript %+v", tr)
	}
}

// An upload of more than 10 chunks may have at most 2 in flight: with
// acks held back (late_acks), a third chunk sent before an ack came is
// refused; an upload's md5 is checked at finish.
func TestUploadInFlightAndMD5(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newSim(t, Config{})
	defer h.close()
	c := h.subscribe(bot1, secret1)
	data := bytes.Repeat([]byte("x"), 11)
	sum := md5.Sum(data)
	init := func(md5hex string) string {
		a := c.call(wecom.CmdUploadMediaInit, "", wecom.UploadInitBody{Type: "file", Filename: "a.txt", TotalSize: int64(len(data)), TotalChunks: 11, MD5: md5hex})
		wantCode(t, a, 0)
		var r wecom.UploadInitResult
		if err := json.Unmarshal(a.Body, &r); err != nil {
			t.Fatal(err)
		}
		return r.UploadID
	}
	chunk := func(id string, i int) wecom.UploadChunkBody {
		return wecom.UploadChunkBody{UploadID: id, ChunkIndex: i, Base64Data: base64.StdEncoding.EncodeToString(data[i : i+1])}
	}
	id := init(hex.EncodeToString(sum[:]))
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: "late_acks", Seconds: 30, DelaySeconds: 2}); err != nil {
		t.Fatal(err)
	}
	r0, r1, r2 := c.send(wecom.CmdUploadMediaChunk, "", chunk(id, 0)), c.send(wecom.CmdUploadMediaChunk, "", chunk(id, 1)), c.send(wecom.CmdUploadMediaChunk, "", chunk(id, 2))
	wantCode(t, c.ack(r0), 0)
	wantCode(t, c.ack(r1), 0)
	if a := c.ack(r2); a.ErrCode != wecom.ErrCodeInvalidParam {
		t.Fatalf("third chunk in flight: errcode %d (%s), want %d", a.ErrCode, a.ErrMsg, wecom.ErrCodeInvalidParam)
	}
	if err := h.srv.Fault(FaultRequest{BotID: bot1, Action: "clear"}); err != nil {
		t.Fatal(err)
	}
	for i := 2; i < 11; i++ { // one at a time: accepted
		wantCode(t, c.call(wecom.CmdUploadMediaChunk, "", chunk(id, i)), 0)
	}
	wantCode(t, c.call(wecom.CmdUploadMediaFinish, "", wecom.UploadFinishBody{UploadID: id}), 0)

	id = init("0123456789abcdef0123456789abcdef")
	for i := range 11 {
		wantCode(t, c.call(wecom.CmdUploadMediaChunk, "", chunk(id, i)), 0)
	}
	wantCode(t, c.call(wecom.CmdUploadMediaFinish, "", wecom.UploadFinishBody{UploadID: id}), wecom.ErrCodeInvalidParam)
}
