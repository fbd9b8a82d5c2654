package wecomsim

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
)

// The media a user sends (image, file, video, the images of a mixed
// message, a quoted image or file) is served the way WeCom serves it in
// long-connection mode, as the official Node SDK (@wecom/aibot-node-sdk,
// src/crypto.ts decryptFile) reads it:
//
//   - each item has its own random 32-byte key, sent in the callback as
//     base64 `aeskey` (43 characters, no padding, like WeCom's
//     EncodingAESKey; the SDK's decoder takes it with or without '=');
//   - the body at the item's `url` is the file encrypted with AES-256-CBC,
//     the IV being the key's first 16 bytes, padded PKCS#7 to a multiple
//     of 32 bytes (not AES's 16: the SDK turns Node's own padding off for
//     that reason and accepts pad values 1 to 32);
//   - the file's name is in Content-Disposition (filename*=UTF-8''…);
//   - the URL works for MediaLifetime (default 5 minutes) from the
//     message's post, then answers 403 (assumed: what WeCom's CDN answers
//     an expired link is not public).

// MediaPart is the bytes of one media item a user sends: given as base64,
// read from a file on the simulator's machine, or generated.
type MediaPart struct {
	// ContentBase64 is the file's bytes, base64 (standard alphabet).
	ContentBase64 string `json:"content_base64,omitempty"`
	// Path reads the bytes from a file on the simulator's machine instead.
	Path string `json:"path,omitempty"`
	// Filename is the name served in Content-Disposition. Default
	// image.png, file.txt or video.mp4 (or Path's base name).
	Filename string `json:"filename,omitempty"`
	// Width and Height size a generated image (a PNG). Default 64×48.
	Width  int `json:"width,omitempty"`
	Height int `json:"height,omitempty"`
	// Size is a generated file's or video's length in bytes. Default 1024.
	Size int `json:"size,omitempty"`
	// Fault breaks what the bot downloads, for bad-input tests: "aeskey"
	// (the callback's aeskey is not the key: the padding comes out wrong),
	// "short_key" (an aeskey of 16 bytes), "key_not_base64" (the aeskey is
	// not base64 at all), "padding" (the file encrypted
	// with a padding byte of 0), "truncate" (the body served stops half
	// way), "url" (the callback's url is not an http URL), "gone" (the
	// URL answers 404 at once), "expired" (the URL has expired already:
	// 403, as every URL past MediaLifetime), "stall" (the URL sends nothing
	// until the client gives up), "hold" (the URL sends nothing until
	// Server.ReleaseMedia releases the message's items, then the file).
	Fault string `json:"fault,omitempty"`
}

// MixedPart is one part of a mixed message: text, or an image.
type MixedPart struct {
	MsgType string `json:"msgtype"` // "text" or "image"
	// RawMsgType, instead of MsgType, sends this part's msgtype verbatim
	// with no content: a part type WeCom may add later.
	RawMsgType string `json:"raw_msgtype,omitempty"`
	Text       string `json:"text,omitempty"`
	MediaPart
}

// QuotePart is the message a user quotes: msgtype text, voice (Text), image
// or file (the MediaPart), or mixed (Items).
type QuotePart struct {
	MsgType string `json:"msgtype"`
	Text    string `json:"text,omitempty"`
	MediaPart
	Items []MixedPart `json:"items,omitempty"`
}

// MediaInfo is one media item the simulator serves.
type MediaInfo struct {
	ID       string `json:"id"`
	MsgID    string `json:"msgid"`
	Kind     string `json:"kind"` // image, file or video
	Filename string `json:"filename"`
	Size     int    `json:"size"` // the file's bytes, before encryption
	// Downloads counts GETs of its URL that were served (expired and
	// faulty-URL ones are not).
	Downloads int64     `json:"downloads"`
	Expires   time.Time `json:"expires"`
	Fault     string    `json:"fault,omitempty"`
}

const mediaFaults = "aeskey, short_key, key_not_base64, padding, truncate, url, gone, expired, stall or hold"

// servedMedia is one item's bytes and key.
type servedMedia struct {
	MediaInfo
	bot   string
	key   []byte // the real key
	sent  string // the aeskey the callback carries
	plain []byte
	body  []byte // encrypted
	// release, for a "hold" item, is closed by ReleaseMedia (under
	// mediaFiles.mu, once: released).
	release  chan struct{}
	released bool
}

// mediaFiles is every item served, by id.
type mediaFiles struct {
	mu    sync.Mutex
	items map[string]*servedMedia
}

// mediaBody is a message's media, kept so a replay sends the same URLs
// and keys (as WeCom's redelivery would).
type mediaBody struct {
	item  *servedMedia // image, file or video
	mixed []mixedEntry
	quote *quoteEntry
}

type mixedEntry struct {
	text string
	img  *servedMedia // nil for text
	raw  string       // a raw part's msgtype ("" for text and image)
}

type quoteEntry struct {
	msgType string
	text    string
	item    *servedMedia
	mixed   []mixedEntry
}

// newMedia prepares msgid's media from req. Call before the message is
// kept: an error leaves nothing behind.
func (s *Server) newMedia(botID, msgid string, req MessageRequest, now time.Time) (*mediaBody, []*servedMedia, error) {
	var made []*servedMedia
	mk := func(kind string, p MediaPart) (*servedMedia, error) {
		m, err := s.prepareMedia(botID, msgid, kind, p, now)
		if err == nil {
			made = append(made, m)
		}
		return m, err
	}
	mixed := func(items []MixedPart, where string) ([]mixedEntry, error) {
		if len(items) == 0 {
			return nil, invalid("%s: a mixed message needs items (text and image parts)", where)
		}
		out := make([]mixedEntry, 0, len(items))
		for i, it := range items {
			if it.RawMsgType != "" {
				if it.MsgType != "" {
					return nil, invalid("%s %d: give msgtype or raw_msgtype, not both", where, i)
				}
				out = append(out, mixedEntry{raw: it.RawMsgType})
				continue
			}
			switch it.MsgType {
			case wecom.MsgTypeText:
				out = append(out, mixedEntry{text: it.Text})
			case wecom.MsgTypeImage:
				img, err := mk(wecom.MsgTypeImage, it.MediaPart)
				if err != nil {
					return nil, fmt.Errorf("%s %d: %w", where, i, err)
				}
				out = append(out, mixedEntry{img: img})
			default:
				return nil, invalid("%s %d: msgtype %q: want text or image", where, i, it.MsgType)
			}
		}
		return out, nil
	}
	mb := &mediaBody{}
	var err error
	switch req.MsgType {
	case wecom.MsgTypeImage, wecom.MsgTypeFile, wecom.MsgTypeVideo:
		mb.item, err = mk(req.MsgType, req.MediaPart)
	case wecom.MsgTypeMixed:
		mb.mixed, err = mixed(req.Items, "items")
	}
	if err != nil {
		return nil, nil, err
	}
	if q := req.Quote; q != nil {
		mb.quote = &quoteEntry{msgType: q.MsgType, text: q.Text}
		switch q.MsgType {
		case wecom.MsgTypeText, wecom.MsgTypeVoice:
			if q.Text == "" {
				return nil, nil, invalid("quote: text is required for a quoted %s", q.MsgType)
			}
		case wecom.MsgTypeImage, wecom.MsgTypeFile:
			mb.quote.item, err = mk(q.MsgType, q.MediaPart)
		case wecom.MsgTypeMixed:
			mb.quote.mixed, err = mixed(q.Items, "quote.items")
		default:
			return nil, nil, invalid("quote.msgtype %q: want text, image, mixed, voice or file", q.MsgType)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	return mb, made, nil
}

// keepMedia makes prepared items downloadable.
func (s *Server) keepMedia(items []*servedMedia) {
	s.files.mu.Lock()
	defer s.files.mu.Unlock()
	if s.files.items == nil {
		s.files.items = make(map[string]*servedMedia)
	}
	for _, m := range items {
		s.files.items[m.ID] = m
	}
}

// prepareMedia reads or generates one item's bytes and encrypts them.
func (s *Server) prepareMedia(botID, msgid, kind string, p MediaPart, now time.Time) (*servedMedia, error) {
	switch p.Fault {
	case "", "aeskey", "short_key", "key_not_base64", "padding", "truncate", "url", "gone", "expired", "stall", "hold":
	default:
		return nil, invalid("fault %q: want %s", p.Fault, mediaFaults)
	}
	var plain []byte
	name := p.Filename
	switch {
	case p.ContentBase64 != "" && p.Path != "":
		return nil, invalid("give content_base64 or path, not both")
	case p.ContentBase64 != "":
		var err error
		if plain, err = base64.StdEncoding.DecodeString(p.ContentBase64); err != nil {
			return nil, invalid("content_base64 is not base64: %v", err)
		}
	case p.Path != "":
		var err error
		if plain, err = os.ReadFile(p.Path); err != nil {
			return nil, invalid("path: %v", err)
		}
		if name == "" {
			name = p.Path[strings.LastIndexAny(p.Path, `/\`)+1:]
		}
	case kind == wecom.MsgTypeImage:
		if p.Width < 0 || p.Height < 0 || p.Width > 4096 || p.Height > 4096 {
			return nil, invalid("width and height: want 1 to 4096 pixels (0 for 64×48)")
		}
		plain = generatePNG(max(p.Width, 0), max(p.Height, 0))
	default:
		if p.Size < 0 || p.Size > 256<<20 {
			return nil, invalid("size %d: want 1 to %d bytes (0 for 1024)", p.Size, 256<<20)
		}
		plain = generateFile(p.Size)
	}
	if name == "" {
		name = map[string]string{wecom.MsgTypeImage: "image.png", wecom.MsgTypeFile: "file.txt", wecom.MsgTypeVideo: "video.mp4"}[kind]
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	m := &servedMedia{
		MediaInfo: MediaInfo{ID: newID("media"), MsgID: msgid, Kind: kind, Filename: name, Size: len(plain),
			Expires: now.Add(s.cfg.MediaLifetime), Fault: p.Fault},
		bot: botID, key: key, plain: plain,
		sent: base64.RawStdEncoding.EncodeToString(key),
	}
	padByte := -1
	switch p.Fault {
	case "short_key":
		m.sent = base64.RawStdEncoding.EncodeToString(key[:16])
	case "key_not_base64":
		m.sent = "not base64: " + m.sent[:8] + "!"
	case "expired":
		m.Expires = now
	case "padding":
		padByte = 0
	case "hold":
		m.release = make(chan struct{})
	}
	m.body = encryptMedia(key, plain, padByte)
	if p.Fault == "aeskey" {
		m.sent = base64.RawStdEncoding.EncodeToString(wrongKey(m.body))
	}
	return m, nil
}

// wrongKey is a key that body was not encrypted with and whose decryption
// of body ends in a padding length out of range (0 or above 32): any other
// key would decrypt to a valid-looking padding about once in 256 (a last
// byte of 1), and the file would pass as garbage instead of failing.
func wrongKey(body []byte) []byte {
	for {
		k := make([]byte, 32)
		_, _ = rand.Read(k)
		block, err := aes.NewCipher(k)
		if err != nil {
			panic(err) // 32-byte keys only: a bug here
		}
		prev := k[:aes.BlockSize] // the IV, for a body of one block
		if len(body) >= 2*aes.BlockSize {
			prev = body[len(body)-2*aes.BlockSize : len(body)-aes.BlockSize]
		}
		last := make([]byte, aes.BlockSize)
		block.Decrypt(last, body[len(body)-aes.BlockSize:])
		if pad := last[aes.BlockSize-1] ^ prev[aes.BlockSize-1]; pad == 0 || pad > 32 {
			return k
		}
	}
}

// EncryptMedia is what WeCom does to a file before serving it: AES-256-CBC
// with key (32 bytes), the IV its first 16 bytes, PKCS#7 padding to a
// multiple of 32 bytes. A test uses it to make bodies of its own.
func EncryptMedia(key, plain []byte) []byte { return encryptMedia(key, plain, -1) }

// encryptMedia is EncryptMedia; padByte ≥ 0 writes that byte as padding
// instead of the pad length (a bad-padding fault).
func encryptMedia(key, plain []byte, padByte int) []byte {
	const padBlock = 32
	n := padBlock - len(plain)%padBlock
	fill := byte(n)
	if padByte >= 0 {
		fill = byte(padByte)
	}
	buf := make([]byte, len(plain)+n)
	copy(buf, plain)
	for i := len(plain); i < len(buf); i++ {
		buf[i] = fill
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err) // 32-byte keys only: a bug here
	}
	cipher.NewCBCEncrypter(block, key[:aes.BlockSize]).CryptBlocks(buf, buf)
	return buf
}

// generatePNG is a w×h (default 64×48) gradient.
func generatePNG(w, h int) []byte {
	if w == 0 {
		w = 64
	}
	if h == 0 {
		h = 48
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{R: uint8(x * 255 / w), G: uint8(y * 255 / h), B: 128, A: 255})
		}
	}
	var buf bytes.Buffer
	_ = png.Encode(&buf, img)
	return buf.Bytes()
}

// generateFile is size (default 1024) bytes of numbered text lines.
func generateFile(size int) []byte {
	if size == 0 {
		size = 1024
	}
	var buf bytes.Buffer
	buf.Grow(size + 64)
	for i := 1; buf.Len() < size; i++ {
		fmt.Fprintf(&buf, "line %d of a file sent to the bot\n", i)
	}
	return buf.Bytes()[:size]
}

// mediaBase is where the bot reaches the simulator: Config.MediaBaseURL,
// or the host its subscribed connection dialed. Call with b.mu held.
func (s *Server) mediaBase(b *bot) string {
	if s.cfg.MediaBaseURL != "" {
		return strings.TrimRight(s.cfg.MediaBaseURL, "/")
	}
	if b.live != nil && b.live.base != "" {
		return b.live.base
	}
	return "http://wecomsim.invalid"
}

// content is item's callback fields.
func (m *servedMedia) content(base string) *wecom.MediaContent {
	u := base + "/media/" + m.ID
	if m.Fault == "url" {
		u = "ftp//" + m.ID + " not a url"
	}
	return &wecom.MediaContent{URL: u, AESKey: m.sent}
}

func mixedContent(items []mixedEntry, base string) *wecom.MixedContent {
	mc := &wecom.MixedContent{}
	for _, it := range items {
		if it.raw != "" {
			mc.MsgItem = append(mc.MsgItem, wecom.MixedItem{MsgType: it.raw})
			continue
		}
		if it.img != nil {
			mc.MsgItem = append(mc.MsgItem, wecom.MixedItem{MsgType: wecom.MsgTypeImage, Image: it.img.content(base)})
		} else {
			mc.MsgItem = append(mc.MsgItem, wecom.MixedItem{MsgType: wecom.MsgTypeText, Text: &wecom.TextContent{Content: it.text}})
		}
	}
	return mc
}

// fill writes the message's media fields into cb.
func (mb *mediaBody) fill(cb *wecom.MsgCallback, base string) {
	if mb == nil {
		return
	}
	if mb.item != nil {
		c := mb.item.content(base)
		switch cb.MsgType {
		case wecom.MsgTypeImage:
			cb.Image = c
		case wecom.MsgTypeFile:
			cb.File = c
		case wecom.MsgTypeVideo:
			cb.Video = c
		}
	}
	if mb.mixed != nil {
		cb.Mixed = mixedContent(mb.mixed, base)
	}
	if q := mb.quote; q != nil {
		wq := &wecom.Quote{MsgType: q.msgType}
		switch q.msgType {
		case wecom.MsgTypeText:
			wq.Text = &wecom.TextContent{Content: q.text}
		case wecom.MsgTypeVoice:
			wq.Voice = &wecom.TextContent{Content: q.text}
		case wecom.MsgTypeImage:
			wq.Image = q.item.content(base)
		case wecom.MsgTypeFile:
			wq.File = q.item.content(base)
		case wecom.MsgTypeMixed:
			wq.Mixed = mixedContent(q.mixed, base)
		}
		cb.Quote = wq
	}
}

// infos are the message's items as the transcript lists them.
func (mb *mediaBody) infos() []MediaInfo {
	if mb == nil {
		return nil
	}
	var out []MediaInfo
	add := func(m *servedMedia) {
		if m != nil {
			out = append(out, m.MediaInfo)
		}
	}
	add(mb.item)
	for _, it := range mb.mixed {
		add(it.img)
	}
	if mb.quote != nil {
		add(mb.quote.item)
		for _, it := range mb.quote.mixed {
			add(it.img)
		}
	}
	return out
}

// Media lists the items served for bot's messages, oldest first, with
// their download counts.
func (s *Server) Media(botID string) ([]MediaInfo, error) {
	if _, err := s.needBot(botID); err != nil {
		return nil, err
	}
	s.files.mu.Lock()
	defer s.files.mu.Unlock()
	out := []MediaInfo{}
	for _, m := range s.files.items {
		if m.bot == botID {
			out = append(out, m.MediaInfo)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Expires.Before(out[j].Expires) || out[i].Expires.Equal(out[j].Expires) && out[i].ID < out[j].ID
	})
	return out, nil
}

// ReleaseMedia lets the held downloads of msgid's "hold" items go on (and
// every later one): their URLs send the file. It returns how many items
// it released.
func (s *Server) ReleaseMedia(msgid string) int {
	s.files.mu.Lock()
	defer s.files.mu.Unlock()
	n := 0
	for _, m := range s.files.items {
		if m.MsgID == msgid && m.release != nil && !m.released {
			close(m.release)
			m.released = true
			n++
		}
	}
	return n
}

// MediaBytes is an item's bytes before encryption (a test compares what
// the bot stored with them).
func (s *Server) MediaBytes(id string) ([]byte, bool) {
	s.files.mu.Lock()
	defer s.files.mu.Unlock()
	m, ok := s.files.items[id]
	if !ok {
		return nil, false
	}
	return bytes.Clone(m.plain), true
}

// httpMedia serves GET /media/{id}: the encrypted body until it expires.
func (s *Server) httpMedia(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	now := s.now()
	s.files.mu.Lock()
	m := s.files.items[id]
	var body []byte
	var fault, name, bot string
	var release chan struct{}
	expired := false
	if m != nil {
		fault, name, bot, release = m.Fault, m.Filename, m.bot, m.release
		expired = !now.Before(m.Expires)
		if !expired && fault != "gone" {
			m.Downloads++
			body = m.body
		}
	}
	s.files.mu.Unlock()
	if m != nil {
		if b, err := s.bot(bot); err == nil {
			b.mu.Lock()
			if expired {
				b.stats.MediaExpired++
			} else if body != nil {
				b.stats.MediaDownloads++
			}
			b.mu.Unlock()
		}
	}
	switch {
	case m == nil || fault == "gone":
		writeError(w, http.StatusNotFound, "no such media: the URL is wrong")
		return
	case expired:
		writeError(w, http.StatusForbidden, "the media URL expired: WeCom's URLs work for about five minutes")
		return
	}
	if fault == "stall" {
		<-r.Context().Done() // the client gave up (or the server closed)
		return
	}
	if release != nil {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", "attachment; filename*=UTF-8''"+url.PathEscape(name))
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if fault == "truncate" {
		// The declared length, half the body: the client sees the
		// connection end early.
		w.WriteHeader(http.StatusOK)
		w.Write(body[:len(body)/2])
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		panic(http.ErrAbortHandler)
	}
	w.Write(body)
}
