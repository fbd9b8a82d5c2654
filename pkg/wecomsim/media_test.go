package wecomsim

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
)

// sdkDecrypt reads a media body as the official SDK's decryptFile does:
// key = base64(aeskey) (32 bytes), IV = key[:16], AES-256-CBC, PKCS#7
// padding of 1 to 32 bytes, every padding byte checked.
func sdkDecrypt(body []byte, aeskey string) ([]byte, error) {
	key, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(aeskey, "="))
	if err != nil {
		return nil, err
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("key is %d bytes", len(key))
	}
	if len(body) == 0 || len(body)%aes.BlockSize != 0 {
		return nil, fmt.Errorf("body of %d bytes is not whole blocks", len(body))
	}
	block, _ := aes.NewCipher(key)
	out := make([]byte, len(body))
	cipher.NewCBCDecrypter(block, key[:16]).CryptBlocks(out, body)
	pad := int(out[len(out)-1])
	if pad < 1 || pad > 32 || pad > len(out) {
		return nil, fmt.Errorf("bad padding %d", pad)
	}
	for _, b := range out[len(out)-pad:] {
		if int(b) != pad {
			return nil, errors.New("padding bytes differ")
		}
	}
	return out[:len(out)-pad], nil
}

// sdkKey is the error the SDK's key decoding gives aeskey, nil if it is
// a 32-byte key.
func sdkKey(aeskey string) error {
	key, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(aeskey, "="))
	if err == nil && len(key) != 32 {
		err = fmt.Errorf("key is %d bytes", len(key))
	}
	return err
}

func download(t *testing.T, u string) (int, []byte, http.Header, error) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, resp.Header, err
}

func TestMediaImageServedEncryptedUntilItExpires(t *testing.T) {
	h := newSim(t, Config{})
	defer h.close()
	c := h.subscribe(bot1, secret1)
	photo := []byte("\x89PNG not really, but bytes of a photo, 45 bytes")
	h.post(MessageRequest{BotID: bot1, UserID: "alice", MsgType: "image",
		MediaPart: MediaPart{ContentBase64: base64.StdEncoding.EncodeToString(photo), Filename: "照片 1.png"}})
	_, m := c.msgCallback()
	if m.MsgType != "image" || m.Image == nil || m.Image.URL == "" || len(m.Image.AESKey) != 43 {
		t.Fatalf("image callback %+v", m)
	}
	if !strings.HasPrefix(m.Image.URL, h.ts.URL+"/media/") {
		t.Fatalf("url %s is not on the simulator the bot dialed (%s)", m.Image.URL, h.ts.URL)
	}
	status, body, hdr, err := download(t, m.Image.URL)
	if status != 200 || err != nil {
		t.Fatalf("GET: %d %v", status, err)
	}
	if len(body)%32 != 0 {
		t.Fatalf("body of %d bytes: want PKCS#7 padding to a multiple of 32", len(body))
	}
	got, err := sdkDecrypt(body, m.Image.AESKey)
	if err != nil || !bytes.Equal(got, photo) {
		t.Fatalf("decrypted %q, %v; want the bytes sent", got, err)
	}
	if cd := hdr.Get("Content-Disposition"); !strings.Contains(cd, "filename*=UTF-8''%E7%85%A7%E7%89%87%201.png") {
		t.Fatalf("Content-Disposition %q", cd)
	}
	if st := h.stats(bot1); st.MediaDownloads != 1 {
		t.Fatalf("media_downloads %d, want 1", st.MediaDownloads)
	}
	list, _ := h.srv.Media(bot1)
	if len(list) != 1 || list[0].Downloads != 1 || list[0].Size != len(photo) || list[0].Filename != "照片 1.png" {
		t.Fatalf("media %+v", list)
	}

	h.clock.Advance(DefaultMediaLifetime)
	if status, _, _, _ := download(t, m.Image.URL); status != http.StatusForbidden {
		t.Fatalf("GET after the lifetime: %d, want 403", status)
	}
	if st := h.stats(bot1); st.MediaExpired != 1 || st.MediaDownloads != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMediaGeneratedKindsMixedAndQuote(t *testing.T) {
	h := newSim(t, Config{MediaLifetime: time.Minute})
	defer h.close()
	c := h.subscribe(bot1, secret1)

	// A generated image is a real PNG of the size asked.
	h.post(MessageRequest{BotID: bot1, UserID: "alice", MsgType: "image", MediaPart: MediaPart{Width: 30, Height: 20}})
	_, m := c.msgCallback()
	_, body, _, _ := download(t, m.Image.URL)
	plain, err := sdkDecrypt(body, m.Image.AESKey)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := png.DecodeConfig(bytes.NewReader(plain)); err != nil || cfg.Width != 30 || cfg.Height != 20 {
		t.Fatalf("generated image %+v, %v", cfg, err)
	}

	for _, kind := range []string{"file", "video"} {
		h.post(MessageRequest{BotID: bot1, UserID: "alice", MsgType: kind, MediaPart: MediaPart{Size: 1000}})
		_, m := c.msgCallback()
		mc := map[string]*wecom.MediaContent{"file": m.File, "video": m.Video}[kind]
		if m.MsgType != kind || mc == nil {
			t.Fatalf("%s callback %+v", kind, m)
		}
		_, body, _, _ := download(t, mc.URL)
		if plain, err := sdkDecrypt(body, mc.AESKey); err != nil || len(plain) != 1000 {
			t.Fatalf("%s: %d bytes, %v", kind, len(plain), err)
		}
	}

	// Mixed: text and images in order, each image its own key.
	h.post(MessageRequest{BotID: bot1, UserID: "alice", MsgType: "mixed", Items: []MixedPart{
		{MsgType: "text", Text: "compare these"}, {MsgType: "image"}, {MsgType: "image", MediaPart: MediaPart{Width: 8, Height: 8}}}})
	_, m = c.msgCallback()
	if m.Mixed == nil || len(m.Mixed.MsgItem) != 3 || m.Mixed.MsgItem[0].Text.Content != "compare these" ||
		m.Mixed.MsgItem[1].Image == nil || m.Mixed.MsgItem[2].Image == nil || m.Mixed.MsgItem[1].Image.AESKey == m.Mixed.MsgItem[2].Image.AESKey {
		t.Fatalf("mixed callback %+v", m.Mixed)
	}
	if m.PlainText() != "compare these" {
		t.Fatalf("plain text %q", m.PlainText())
	}

	// Quotes of each kind.
	for _, q := range []QuotePart{
		{MsgType: "text", Text: "earlier"}, {MsgType: "voice", Text: "said"}, {MsgType: "image"},
		{MsgType: "file", MediaPart: MediaPart{Filename: "a.csv"}}, {MsgType: "mixed", Items: []MixedPart{{MsgType: "image"}}},
	} {
		h.post(MessageRequest{BotID: bot1, UserID: "alice", Text: "what about this?", Quote: &q})
		_, m := c.msgCallback()
		wq := m.Quote
		ok := wq != nil && wq.MsgType == q.MsgType
		switch q.MsgType {
		case "text":
			ok = ok && wq.Text != nil && wq.Text.Content == "earlier"
		case "voice":
			ok = ok && wq.Voice != nil && wq.Voice.Content == "said"
		case "image":
			ok = ok && wq.Image != nil && wq.Image.AESKey != ""
		case "file":
			ok = ok && wq.File != nil && wq.File.AESKey != ""
		case "mixed":
			ok = ok && wq.Mixed != nil && len(wq.Mixed.MsgItem) == 1 && wq.Mixed.MsgItem[0].Image != nil
		}
		if !ok || m.Text == nil || m.Text.Content != "what about this?" {
			t.Fatalf("quote %s: callback %+v quote %+v", q.MsgType, m, wq)
		}
	}
	// The transcript lists a message's media.
	tr := h.srv.Transcript(bot1, "alice")
	if len(tr) == 0 || tr[len(tr)-1].Media == nil || tr[len(tr)-1].Media[0].Kind != "image" {
		t.Fatalf("transcript %+v", tr[len(tr)-1])
	}
}

// The aeskey fault's key never decrypts the body: a random wrong key
// alone let about one file in 256 through as garbage (a last byte of 1 is
// valid padding). 2,000 tries caught that with a chance of 1-(255/256)^2000,
// above 99.9%.
func TestMediaFaultAESKeyNeverDecrypts(t *testing.T) {
	s := New(Config{})
	for i := range 2000 {
		m, err := s.prepareMedia(bot1, "m", wecom.MsgTypeFile, MediaPart{Size: 1 + i%100, Fault: "aeskey"}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sdkDecrypt(m.body, m.sent); err == nil {
			t.Fatalf("try %d: the wrong aeskey decrypted a body of %d bytes", i, m.Size)
		}
	}
}

func TestMediaFaultsBreakTheDownload(t *testing.T) {
	h := newSim(t, Config{})
	defer h.close()
	c := h.subscribe(bot1, secret1)
	post := func(fault string) *wecom.MediaContent {
		h.post(MessageRequest{BotID: bot1, UserID: "alice", MsgType: "file", MediaPart: MediaPart{Size: 100, Fault: fault}})
		_, m := c.msgCallback()
		return m.File
	}
	for _, fault := range []string{"aeskey", "padding"} {
		f := post(fault)
		_, body, _, _ := download(t, f.URL)
		if _, err := sdkDecrypt(body, f.AESKey); err == nil {
			t.Fatalf("%s: decrypted fine", fault)
		}
	}
	if f := post("short_key"); len(f.AESKey) >= 43 {
		t.Fatalf("short_key: aeskey %q", f.AESKey)
	}
	f := post("truncate")
	if _, body, _, err := download(t, f.URL); err == nil {
		t.Fatalf("truncate: read %d bytes without an error", len(body))
	}
	if f := post("url"); strings.HasPrefix(f.URL, "http") {
		t.Fatalf("url fault: %s", f.URL)
	}
	if status, _, _, _ := download(t, post("gone").URL); status != http.StatusNotFound {
		t.Fatalf("gone: %d", status)
	}
	if f := post("key_not_base64"); sdkKey(f.AESKey) == nil {
		t.Fatalf("key_not_base64: aeskey %q decodes", f.AESKey)
	}
	if status, _, _, _ := download(t, post("expired").URL); status != http.StatusForbidden {
		t.Fatalf("expired: %d, want 403", status)
	}
	if st := h.stats(bot1); st.MediaExpired != 1 {
		t.Fatalf("expired: media_expired %d, want 1", st.MediaExpired)
	}
	// A mixed part of a type WeCom may add later: sent as it is, no content.
	h.post(MessageRequest{BotID: bot1, UserID: "alice", MsgType: "mixed", Items: []MixedPart{{MsgType: "text", Text: "look"}, {RawMsgType: "sticker"}}})
	if _, m := c.msgCallback(); len(m.Mixed.MsgItem) != 2 || m.Mixed.MsgItem[1].MsgType != "sticker" || m.Mixed.MsgItem[1].Text != nil || m.Mixed.MsgItem[1].Image != nil {
		t.Fatalf("raw mixed part: %+v", m.Mixed)
	}
	if _, err := h.srv.PostMessage(MessageRequest{BotID: bot1, UserID: "alice", MsgType: "mixed", Items: []MixedPart{{MsgType: "text", RawMsgType: "x"}}}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("msgtype and raw_msgtype: %v", err)
	}
	if _, err := h.srv.PostMessage(MessageRequest{BotID: bot1, UserID: "alice", MsgType: "file", MediaPart: MediaPart{Fault: "nope"}}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("unknown fault: %v", err)
	}
}

func TestMediaOverTheControlAPI(t *testing.T) {
	h := newSim(t, Config{})
	defer h.close()
	c := h.subscribe(bot1, secret1)
	data := bytes.Repeat([]byte("x"), 33) // 33 bytes: padded to 64
	status, res := h.httpDo(http.MethodPost, "/control/messages", map[string]any{
		"bot_id": bot1, "user_id": "alice", "msgtype": "file",
		"content_base64": base64.StdEncoding.EncodeToString(data), "filename": "x.txt"})
	if status != 200 || res["delivered"] != true {
		t.Fatalf("POST: %d %v", status, res)
	}
	_, m := c.msgCallback()
	_, body, _, _ := download(t, m.File.URL)
	if len(body) != 64 {
		t.Fatalf("body %d bytes, want 64", len(body))
	}
	if got, err := sdkDecrypt(body, m.File.AESKey); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("decrypted %q %v", got, err)
	}
	status, res = h.httpDo(http.MethodGet, "/control/media?bot_id="+bot1, nil)
	if list, _ := res["media"].([]any); status != 200 || len(list) != 1 {
		t.Fatalf("GET /control/media: %d %v", status, res)
	}
	for _, bad := range []map[string]any{
		{"bot_id": bot1, "user_id": "alice", "msgtype": "mixed"},
		{"bot_id": bot1, "user_id": "alice", "msgtype": "image", "content_base64": "!!"},
		{"bot_id": bot1, "user_id": "alice", "text": "q", "quote": map[string]any{"msgtype": "video"}},
		{"bot_id": bot1, "user_id": "alice", "msgtype": "sticker"},
	} {
		if status, res := h.httpDo(http.MethodPost, "/control/messages", bad); status != http.StatusBadRequest {
			t.Fatalf("%v: %d %v", bad, status, res)
		}
	}
}
