// Package media takes the files users send (images, files, videos, the
// images of a mixed message, quoted ones) from WeCom to where every worker
// can read them.
//
// WeCom's long connection gives each file as a URL that works for about
// five minutes and a per-file aeskey. The leader that receives the
// message downloads and decrypts its files at once (Fetcher.Fetch),
// together, bounded in bytes, in time per file and in time for the whole
// message from its arrival (the wait for a download slot included), each
// conversation taking at most its share of the node's slots (slots.go),
// and stores each in the media object store
// (jetstream.Store.Media) under <task id>/<n>; the task carries the
// references (task.Attachment). The worker that runs the task, on any
// node, copies them to a temporary directory (Materialize) for its
// backend, and removes them after the run.
//
// The decryption is the official SDK's (@wecom/aibot-node-sdk,
// decryptFile): AES-256-CBC, the key the base64-decoded aeskey (32
// bytes), the IV its first 16 bytes, PKCS#7 padding of 1 to 32 bytes
// (WeCom pads to a multiple of 32, not of AES's 16), every padding byte
// checked. An item without an aeskey is taken as sent, unencrypted, as
// the SDK does (WeCom sends keys in long-connection mode only).
//
// What it guarantees: a file is stored only whole, decrypted and within
// MaxBytes; a file the media store refuses for its bound is ReasonFull,
// and nothing of its message is kept; a failure is an *Error that says which file and why, with the
// sentence to tell the user. What it does not: that the bytes are what
// the name says (the MIME type is sniffed from the bytes first, the
// name's extension second), or that a stored file outlives the store's
// TTL or its task's delivery (the pusher deletes a task's files once its
// delivery is final).
package media

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // image.DecodeConfig of GIFs
	_ "image/jpeg"
	_ "image/png"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Item is one file of a callback to download.
type Item struct {
	Kind   string // wecom.MsgTypeImage, MsgTypeFile or MsgTypeVideo
	URL    string
	AESKey string
	Quoted bool // part of the message the user quoted
}

// MaxItems is the most files one message may carry (a mixed message's
// images and a quote's together).
const MaxItems = 20

// Items lists m's files in the order the user sent them: the message's
// own (image, file, video, a mixed message's images), then the quoted
// message's. Voice has none: WeCom sends its transcription.
func Items(m *wecom.MsgCallback) []Item {
	var out []Item
	add := func(kind string, c *wecom.MediaContent, quoted bool) {
		if c != nil {
			out = append(out, Item{Kind: kind, URL: c.URL, AESKey: c.AESKey, Quoted: quoted})
		}
	}
	mixed := func(mc *wecom.MixedContent, quoted bool) {
		if mc == nil {
			return
		}
		for _, it := range mc.MsgItem {
			if it.MsgType == wecom.MsgTypeImage {
				// An image part without its image is a malformed
				// callback: kept, so its download fails with a reason.
				c := it.Image
				if c == nil {
					c = &wecom.MediaContent{}
				}
				add(wecom.MsgTypeImage, c, quoted)
			}
		}
	}
	switch m.MsgType {
	case wecom.MsgTypeImage:
		add(m.MsgType, orEmpty(m.Image), false)
	case wecom.MsgTypeFile:
		add(m.MsgType, orEmpty(m.File), false)
	case wecom.MsgTypeVideo:
		add(m.MsgType, orEmpty(m.Video), false)
	case wecom.MsgTypeMixed:
		mixed(m.Mixed, false)
	}
	if q := m.Quote; q != nil {
		switch q.MsgType {
		case wecom.MsgTypeImage:
			add(q.MsgType, q.Image, true)
		case wecom.MsgTypeFile:
			add(q.MsgType, q.File, true)
		case wecom.MsgTypeMixed:
			mixed(q.Mixed, true)
		}
	}
	return out
}

// orEmpty keeps a media message whose content is missing as an item with
// no URL, whose download then fails with ReasonBadURL: the user is told.
func orEmpty(c *wecom.MediaContent) *wecom.MediaContent {
	if c == nil {
		return &wecom.MediaContent{}
	}
	return c
}

// Reason is why a file could not be taken.
type Reason string

const (
	ReasonTooMany     Reason = "too_many"    // more than MaxItems files in one message
	ReasonBadURL      Reason = "bad_url"     // no URL, or not an http(s) one
	ReasonRefused     Reason = "refused"     // the media policy refuses the URL, a redirect, the address or a missing aeskey
	ReasonExpired     Reason = "expired"     // WeCom answered 403, 404 or 410: the link expired (or never worked)
	ReasonUnreachable Reason = "unreachable" // the download failed otherwise (network, another HTTP status)
	ReasonTimeout     Reason = "timeout"     // not downloaded within the timeout
	ReasonTooBig      Reason = "too_big"     // over MaxBytes
	ReasonCorrupt     Reason = "corrupt"     // does not decrypt: bad aeskey, bad padding, truncated body
	ReasonStore       Reason = "store"       // the media store did not take it
	ReasonFull        Reason = "store_full"  // the media store is at its bound (media.max_store_bytes)
)

// Error is a file that could not be taken.
type Error struct {
	Item   int // index in Items
	Kind   string
	Reason Reason
	// Limit is the byte limit (ReasonTooBig), the timeout (ReasonTimeout)
	// or MaxItems (ReasonTooMany).
	Limit string
	Err   error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("media: %s %d: %s", e.Kind, e.Item+1, e.Reason)
	if e.Limit != "" {
		msg += " (limit " + e.Limit + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Reply is what the user is told: which file, why, and what to do.
func (e *Error) Reply() string {
	what := map[string]string{wecom.MsgTypeImage: "图片", wecom.MsgTypeFile: "文件", wecom.MsgTypeVideo: "视频"}[e.Kind]
	if what == "" {
		what = "文件"
	}
	switch e.Reason {
	case ReasonTooMany:
		return fmt.Sprintf("抱歉，一条消息最多可以带 %s 个图片或文件，请分开发送。", e.Limit)
	case ReasonTooBig:
		return fmt.Sprintf("抱歉，%s太大，超过了 %s 的上限，未能接收。请压缩或拆分后再发送。", what, e.Limit)
	case ReasonTimeout:
		return fmt.Sprintf("抱歉，%s下载超时（超过 %s），未能接收。请稍后重新发送。", what, e.Limit)
	case ReasonExpired:
		return fmt.Sprintf("抱歉，%s的下载链接已失效，未能接收。请重新发送。", what)
	case ReasonBadURL:
		return fmt.Sprintf("抱歉，%s的下载地址无效，未能接收。请重新发送。", what)
	case ReasonRefused:
		return fmt.Sprintf("抱歉，%s的下载地址不在允许的范围内，未能接收。请联系管理员。", what)
	case ReasonCorrupt:
		return fmt.Sprintf("抱歉，%s无法解密（数据不完整或密钥无效），未能接收。请重新发送。", what)
	case ReasonStore:
		return fmt.Sprintf("抱歉，%s暂时无法保存，未能接收。请稍后重新发送。", what)
	case ReasonFull:
		return fmt.Sprintf("抱歉，文件存储空间已满，%s未能接收。请稍后重新发送；文字消息不受影响。", what)
	}
	return fmt.Sprintf("抱歉，%s下载失败，未能接收。请稍后重新发送。", what)
}

// Decrypt errors (wrapped in an *Error with ReasonCorrupt by Fetch).
var (
	ErrBadKey     = errors.New("aeskey is not base64 of 32 bytes")
	ErrBadLength  = errors.New("body is not a whole number of AES blocks (truncated?)")
	ErrBadPadding = errors.New("PKCS#7 padding is wrong (wrong key or corrupt body)")
)

// Decrypt decrypts a media body as the official SDK's decryptFile does
// (see the package doc). The aeskey may come with or without '='. body is
// not changed.
func Decrypt(body []byte, aeskey string) ([]byte, error) {
	return decryptInPlace(bytes.Clone(body), aeskey)
}

// decryptInPlace is Decrypt overwriting body (one copy of a file in
// memory, not two); the result shares body's array.
func decryptInPlace(body []byte, aeskey string) ([]byte, error) {
	key, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(strings.TrimSpace(aeskey), "="))
	if err != nil || len(key) != 32 {
		return nil, ErrBadKey
	}
	if len(body) == 0 || len(body)%aes.BlockSize != 0 {
		return nil, fmt.Errorf("%w: %d bytes", ErrBadLength, len(body))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, ErrBadKey
	}
	out := body
	cipher.NewCBCDecrypter(block, key[:aes.BlockSize]).CryptBlocks(out, body)
	pad := int(out[len(out)-1])
	if pad < 1 || pad > 32 || pad > len(out) {
		return nil, ErrBadPadding
	}
	for _, b := range out[len(out)-pad:] {
		if int(b) != pad {
			return nil, ErrBadPadding
		}
	}
	return out[:len(out)-pad], nil
}

// Config bounds a Fetcher. Zero fields take their defaults.
type Config struct {
	// MaxBytes is the largest file taken. Default 20 MB.
	MaxBytes int64
	// Timeout bounds one file's download, from when it gets a slot.
	// Default 30s.
	Timeout time.Duration
	// MessageTimeout bounds a message's files together, from the
	// message's arrival (Batch.Arrived): the wait for slots, every
	// download and every store. It must stay below the lifetime of
	// WeCom's URLs (about five minutes). Default 2m.
	MessageTimeout time.Duration
	// Parallel bounds the downloads of this node at once (the bytes of
	// each are in memory until stored). Default 8.
	Parallel int
	// PerConversation bounds the downloads of one conversation at once
	// (of the node's Parallel), so a conversation whose downloads stall
	// leaves slots to the others. Default a quarter of Parallel, at
	// least 1.
	PerConversation int
	// Policy is which URLs are downloaded (policy.go).
	Policy Policy
	// Client downloads. Default: a client of its own that keeps to
	// Policy (no timeout but Timeout's; redirects checked by Policy).
	Client *http.Client
}

// DefaultMessageTimeout is Config.MessageTimeout's default.
const DefaultMessageTimeout = 2 * time.Minute

// Fetcher downloads, decrypts and stores files. It is safe for
// concurrent use.
type Fetcher struct {
	cfg   Config
	slots *slots
}

// New returns a Fetcher with cfg's zero fields defaulted.
func New(cfg Config) *Fetcher {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 20 << 20
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.MessageTimeout <= 0 {
		cfg.MessageTimeout = DefaultMessageTimeout
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 8
	}
	if cfg.PerConversation <= 0 {
		cfg.PerConversation = max(1, cfg.Parallel/4)
	}
	if cfg.Client == nil {
		cfg.Client = cfg.Policy.client()
	}
	return &Fetcher{cfg: cfg, slots: newSlots(cfg.Parallel, cfg.PerConversation)}
}

// MessageTimeout is the deadline a message's files are held to, from its
// arrival (Config.MessageTimeout).
func (f *Fetcher) MessageTimeout() time.Duration { return f.cfg.MessageTimeout }

// Batch is one message's files.
type Batch struct {
	// TaskID names the stored objects: <TaskID>/<n>.
	TaskID string
	// Conversation is whose share of the node's downloads the files take
	// (the bot and the chat).
	Conversation string
	// Arrived is when the message arrived: its files are stored within
	// MessageTimeout of it, or not at all. Zero: now.
	Arrived time.Time
	Items   []Item
}

// Fetch downloads and decrypts b's items, at once as far as the slots
// allow, and stores each in obs as <TaskID>/<n>; the attachments are in
// the items' order. On the first failure it stops the others, removes
// what was stored and returns an *Error (ReasonTimeout when the message's
// deadline passed), or ctx's cause when ctx ended first.
func (f *Fetcher) Fetch(ctx context.Context, obs natsjs.ObjectStore, b Batch) ([]task.Attachment, error) {
	items := b.Items
	if len(items) > MaxItems {
		return nil, &Error{Item: MaxItems, Kind: items[MaxItems].Kind, Reason: ReasonTooMany, Limit: strconv.Itoa(MaxItems)}
	}
	arrived := b.Arrived
	if arrived.IsZero() {
		arrived = time.Now()
	}
	mctx, cancel := context.WithDeadlineCause(ctx, arrived.Add(f.cfg.MessageTimeout), errMessageTimeout)
	defer cancel()
	gctx, stop := context.WithCancelCause(mctx)
	defer stop(nil)
	out := make([]task.Attachment, len(items))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for i, it := range items {
		wg.Go(func() {
			a, err := f.one(gctx, obs, b, i, it)
			if err == nil {
				out[i] = a
				return
			}
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
			stop(errSiblingFailed)
		})
	}
	wg.Wait()
	if first != nil {
		f.remove(context.WithoutCancel(ctx), obs, out)
		return nil, first
	}
	return out, nil
}

var (
	errMessageTimeout = errors.New("media: the message's files not stored within its deadline")
	errSiblingFailed  = errors.New("media: another file of the message failed")
)

// remove deletes stored attachments, best effort (the TTL removes what
// this misses).
func (f *Fetcher) remove(ctx context.Context, obs natsjs.ObjectStore, atts []task.Attachment) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, a := range atts {
		if a.Key != "" {
			_ = obs.Delete(ctx, a.Key)
		}
	}
}

// one takes item i of b under ctx (the message's deadline).
func (f *Fetcher) one(ctx context.Context, obs natsjs.ObjectStore, b Batch, i int, it Item) (task.Attachment, error) {
	fail := func(r Reason, err error) (task.Attachment, error) {
		e := &Error{Item: i, Kind: it.Kind, Reason: r, Err: err}
		switch r {
		case ReasonTooBig:
			e.Limit = FormatBytes(f.cfg.MaxBytes)
		case ReasonTimeout:
			e.Limit = f.cfg.Timeout.String()
			if errors.Is(err, errMessageTimeout) {
				e.Limit = f.cfg.MessageTimeout.String()
			}
		}
		return task.Attachment{}, e
	}
	// ended is the failure of ctx's end: the message's deadline, or the
	// caller's (or a sibling's) reason.
	ended := func() (task.Attachment, error) {
		if cause := context.Cause(ctx); errors.Is(cause, errMessageTimeout) {
			return fail(ReasonTimeout, cause)
		}
		return task.Attachment{}, context.Cause(ctx)
	}
	u, err := url.Parse(it.URL)
	if it.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fail(ReasonBadURL, fmt.Errorf("url %q", clip(it.URL)))
	}
	if err := f.cfg.Policy.checkURL(u); err != nil {
		return fail(ReasonRefused, err)
	}
	if f.cfg.Policy.Strict && it.AESKey == "" {
		return fail(ReasonRefused, fmt.Errorf("%w: no aeskey (WeCom sends one with every file)", ErrRefused))
	}
	if err := f.slots.acquire(ctx, b.Conversation); err != nil {
		return ended()
	}
	defer f.slots.release(b.Conversation)
	dctx, cancel := context.WithTimeoutCause(ctx, f.cfg.Timeout, errTimeout)
	defer cancel()
	body, name, err := f.download(dctx, u)
	var reason Reason
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return ended()
	case errors.Is(context.Cause(dctx), errTimeout):
		return fail(ReasonTimeout, err)
	case errors.As(err, &reason):
		return fail(reason, err)
	case errors.Is(err, ErrRefused):
		return fail(ReasonRefused, err)
	default:
		return fail(ReasonUnreachable, err)
	}
	// No aeskey: the bytes are not encrypted (WeCom sends the key in
	// long-connection mode only; the SDK's downloadFile then returns
	// the body as it came).
	plain := body
	if it.AESKey != "" {
		if plain, err = decryptInPlace(body, it.AESKey); err != nil {
			return fail(ReasonCorrupt, err)
		}
	}
	if int64(len(plain)) > f.cfg.MaxBytes {
		return fail(ReasonTooBig, fmt.Errorf("%d bytes", len(plain)))
	}
	a := describe(it, i, name, plain)
	a.Key = b.TaskID + "/" + strconv.Itoa(i)
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.Timeout)
	defer scancel()
	if _, err := obs.PutBytes(sctx, a.Key, plain); err != nil {
		// A refused put may leave the object's name behind (nats.go
		// publishes it beside the bytes, and purges only the bytes).
		_ = obs.Delete(sctx, a.Key)
		if jetstream.MediaFull(err) {
			return fail(ReasonFull, err)
		}
		return fail(ReasonStore, err)
	}
	return a, nil
}

var errTimeout = errors.New("media download timeout")

func (r Reason) Error() string { return string(r) }

// download GETs u, reading at most MaxBytes plus a padding's worth.
func (f *Fetcher) download(ctx context.Context, u *url.URL) ([]byte, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ReasonBadURL, err)
	}
	resp, err := f.cfg.Client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return nil, "", fmt.Errorf("%w: HTTP %d", ReasonExpired, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return nil, "", fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	limit := f.cfg.MaxBytes + 32 // the padding
	if resp.ContentLength > limit {
		return nil, "", fmt.Errorf("%w: %d bytes announced", ReasonTooBig, resp.ContentLength)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, "", fmt.Errorf("%w: body cut after %d bytes: %v", ReasonCorrupt, len(body), err)
	}
	if int64(len(body)) > limit {
		return nil, "", fmt.Errorf("%w: more than %d bytes", ReasonTooBig, limit)
	}
	name := ""
	if _, params, err := mime.ParseMediaType(resp.Header.Get("Content-Disposition")); err == nil {
		name = params["filename"]
	}
	return body, name, nil
}

// describe names an item's bytes: its MIME type (sniffed, else from the
// name), a safe name, the size and, for images, the pixel size.
func describe(it Item, i int, name string, plain []byte) task.Attachment {
	name = safeName(name)
	typ, _, _ := mime.ParseMediaType(http.DetectContentType(plain))
	if ext := path.Ext(name); ext != "" && (typ == "application/octet-stream" || typ == "text/plain") {
		if byName, _, err := mime.ParseMediaType(mime.TypeByExtension(ext)); err == nil && byName != "" {
			typ = byName
		}
	}
	if name == "" {
		name = it.Kind + "-" + strconv.Itoa(i+1)
		if exts, _ := mime.ExtensionsByType(typ); len(exts) > 0 {
			name += exts[0]
		}
	}
	a := task.Attachment{Kind: it.Kind, Name: name, MIME: typ, Size: int64(len(plain)), Quoted: it.Quoted}
	if strings.HasPrefix(typ, "image/") {
		if cfg, _, err := image.DecodeConfig(bytes.NewReader(plain)); err == nil {
			a.Width, a.Height = cfg.Width, cfg.Height
		}
	}
	return a
}

// safeName is a file name without directories or control characters, at
// most 120 bytes: it becomes a file name in a worker's temp dir.
func safeName(name string) string {
	name = strings.ToValidUTF8(name, "")
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, name)
	name = strings.TrimSpace(name)
	if name == "." || name == ".." {
		return ""
	}
	for len(name) > 120 {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	return name
}

func clip(s string) string {
	if len(s) > 80 {
		return strings.ToValidUTF8(s[:80], "") + "…"
	}
	return s
}

// FormatBytes is n as users read it: "20 MB", "512 KB", "300 bytes".
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MB"
	case n >= 1<<10:
		return strconv.FormatInt(n>>10, 10) + " KB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
