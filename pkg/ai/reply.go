package ai

// The reply result type: what a backend sends beside its text (images,
// files, a template card), and how it hands it over during Stream
// without changing the Backend interface.
//
// A backend never writes WeCom frames. It describes the reply (Reply) and
// calls SendReply(ctx, …) during Stream, as often as it likes: images and
// files add up, the last card wins. The worker keeps the reply of the
// attempt that succeeds (a failed attempt's reply is dropped with its
// text), stores its bytes in JetStream, and the leader's pusher sends it:
// images on the stream's finishing frame (msg_item), files, voice and
// video uploaded (aibot_upload_media_*) and sent, the card with the final
// frame (stream_with_template_card) or pushed (template_card). A reply
// WeCom would refuse (CheckReply) is not sent broken: the user is told
// what was left out, in a note after the text.
//
// A card's clicks (template_card_event) come back to the backend that
// sent the card if it implements CardResponder.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
)

// Reply is the rich part of an answer.
type Reply struct {
	// Images are shown with the answer: JPG or PNG, at most MaxReplyImages,
	// each at most MaxReplyImageBytes.
	Images []ReplyFile `json:"images,omitempty"`
	// Files are sent after the answer, each uploaded to WeCom: Kind "file"
	// (the default), "voice" or "video"; at most MaxReplyFileBytes each.
	Files []ReplyFile `json:"files,omitempty"`
	// Card is a WeCom template card (its JSON object, as WeCom's
	// documentation describes template_card), sent with the answer. An
	// interactive card's task_id is botctl's to set: a click on it comes
	// back to this task's backend (CardResponder).
	Card json.RawMessage `json:"card,omitempty"`
}

// ReplyFile is one image or file of a Reply: its bytes, given inline
// (Data; base64 in JSON) or as a local file (Path, read by the worker
// when Stream returns).
type ReplyFile struct {
	Kind string `json:"kind,omitempty"` // a file's: "file" (default), "voice" or "video"
	Name string `json:"name,omitempty"`
	MIME string `json:"mime,omitempty"` // sniffed from the bytes when empty
	Data []byte `json:"data,omitempty"`
	Path string `json:"path,omitempty"`
}

// WeCom's limits on a reply (docs/wecom-protocol.md).
const (
	// MaxReplyImages and MaxReplyImageBytes: msg_item on the finishing
	// frame, JPG or PNG.
	MaxReplyImages     = 10
	MaxReplyImageBytes = 10 << 20
	// MaxReplyFileBytes: an upload of at most 100 chunks of 512 KB.
	MaxReplyFileBytes = 100 * 512 << 10
	// MaxReplyFiles bounds the files of one answer (each is an upload, and
	// uploads are capped per bot: 30 a minute).
	MaxReplyFiles = 5
	// MaxCardBytes bounds a card's JSON.
	MaxCardBytes = 16 << 10
	// MaxReplyBytes bounds the bytes one answer's reply holds while its
	// backend streams (every image's and file's Data, and the card): the
	// most WeCom takes, each image and file at its limit.
	MaxReplyBytes = MaxReplyImages*MaxReplyImageBytes + MaxReplyFiles*MaxReplyFileBytes + MaxCardBytes
)

// ErrReplyTooLarge: a backend sent more than one answer carries (over
// MaxReplyImages images, MaxReplyFiles files or MaxReplyBytes). SendReply
// refuses it as it comes, keeping nothing of it, so that a backend
// streaming replies without end fails at once instead of filling the
// worker's memory. It wraps ErrBadRequest: the same backend would send
// as much again, so the task is not retried.
var ErrReplyTooLarge = fmt.Errorf("%w: the reply is more than one answer carries", ErrBadRequest)

// Add merges r2 into r: images and files appended, r2's card (if any)
// replacing r's.
func (r *Reply) Add(r2 Reply) {
	r.Images = append(r.Images, r2.Images...)
	r.Files = append(r.Files, r2.Files...)
	if len(bytes.TrimSpace(r2.Card)) > 0 {
		r.Card = r2.Card
	}
}

// Empty reports whether r carries nothing.
func (r Reply) Empty() bool {
	return len(r.Images) == 0 && len(r.Files) == 0 && len(bytes.TrimSpace(r.Card)) == 0
}

// ErrNoReplySink: SendReply was called where nobody collects replies (a
// caller of Stream that takes text only, such as the load test's naive
// bot; the worker always collects them).
var ErrNoReplySink = errors.New("ai: no reply sink in this context")

type replySinkKey struct{}

// ReplySink collects what a backend sends with SendReply. Safe for
// concurrent use.
type ReplySink struct {
	mu sync.Mutex
	r  Reply
}

// WithReplySink is ctx carrying sink: Stream called with it may send a
// Reply.
func WithReplySink(ctx context.Context, sink *ReplySink) context.Context {
	return context.WithValue(ctx, replySinkKey{}, sink)
}

// SendReply hands r to the caller of Stream; call it from within Stream.
// ErrNoReplySink when the caller does not take replies: the text alone is
// the answer then. ErrReplyTooLarge when what was sent and r together
// exceed one answer's limits: r is not kept, and the backend fails its
// Stream with that error.
func SendReply(ctx context.Context, r Reply) error {
	sink, _ := ctx.Value(replySinkKey{}).(*ReplySink)
	if sink == nil {
		return ErrNoReplySink
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	next := sink.r // Add appends past sink.r's length only: sink.r is unchanged if next is refused
	next.Add(r)
	if err := next.fits(); err != nil {
		return err
	}
	sink.r = next
	return nil
}

// fits refuses a reply over one answer's limits with ErrReplyTooLarge.
func (r Reply) fits() error {
	size := len(r.Card)
	for _, f := range append(append([]ReplyFile{}, r.Images...), r.Files...) {
		size += len(f.Data)
	}
	switch {
	case len(r.Images) > MaxReplyImages:
		return fmt.Errorf("%w: %d images, at most %d", ErrReplyTooLarge, len(r.Images), MaxReplyImages)
	case len(r.Files) > MaxReplyFiles:
		return fmt.Errorf("%w: %d files, at most %d", ErrReplyTooLarge, len(r.Files), MaxReplyFiles)
	case size > MaxReplyBytes:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrReplyTooLarge, size, MaxReplyBytes)
	}
	return nil
}

// ReplyScope is ctx with a sink of its own for one try of a backend (a
// fallback chain's link): what the backend sends is kept apart, and
// reaches ctx's sink only when commit is called (the try answered). A
// backend that failed after sending leaves nothing behind. Without a
// sink in ctx, ctx is returned and commit does nothing.
func ReplyScope(ctx context.Context) (scoped context.Context, commit func()) {
	parent, _ := ctx.Value(replySinkKey{}).(*ReplySink)
	if parent == nil {
		return ctx, func() {}
	}
	child := &ReplySink{}
	return WithReplySink(ctx, child), func() {
		r := child.Reply()
		parent.mu.Lock()
		defer parent.mu.Unlock()
		parent.r.Add(r)
	}
}

// Reply is what was sent so far.
func (s *ReplySink) Reply() Reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r
}

// Reset forgets what was sent (a new attempt starts from nothing).
func (s *ReplySink) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.r = Reply{}
}

// ReplyBytes is f's bytes: Data, or the file at Path.
func (f ReplyFile) ReplyBytes() ([]byte, error) {
	if len(f.Data) > 0 || f.Path == "" {
		return f.Data, nil
	}
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Path, err)
	}
	return b, nil
}

// CheckReplyImage refuses an image WeCom would refuse: not JPG or PNG, empty,
// or over MaxReplyImageBytes. It returns the MIME type of the bytes.
func CheckReplyImage(name string, data []byte) (string, error) {
	if len(data) == 0 {
		return "", fmt.Errorf("image %q is empty", name)
	}
	if len(data) > MaxReplyImageBytes {
		return "", fmt.Errorf("image %q is %d bytes: at most %d (10 MB)", name, len(data), MaxReplyImageBytes)
	}
	mt := http.DetectContentType(data)
	if mt != "image/png" && mt != "image/jpeg" {
		return "", fmt.Errorf("image %q is %s: only JPG or PNG can be shown", name, mt)
	}
	return mt, nil
}

// FileKind is a ReplyFile's upload type, or an error naming the kinds.
func (f ReplyFile) FileKind() (string, error) {
	switch k := strings.ToLower(f.Kind); k {
	case "", "file":
		return "file", nil
	case "voice", "video", "image":
		return k, nil
	default:
		return "", fmt.Errorf("file %q has kind %q: want file, voice, video or image", f.Name, f.Kind)
	}
}

// CheckCard refuses a card that is not one JSON object of at most
// MaxCardBytes; it returns the card compacted.
func CheckCard(card json.RawMessage) (json.RawMessage, error) {
	t := bytes.TrimSpace(card)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(t, &obj); err != nil {
		return nil, fmt.Errorf("the card is not a JSON object: %v", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, t); err != nil {
		return nil, fmt.Errorf("the card is not valid JSON: %v", err)
	}
	if buf.Len() > MaxCardBytes {
		return nil, fmt.Errorf("the card is %d bytes of JSON: at most %d", buf.Len(), MaxCardBytes)
	}
	if _, ok := obj["card_type"]; !ok {
		return nil, errors.New(`the card has no "card_type" (text_notice, news_notice, button_interaction, vote_interaction or multiple_interaction)`)
	}
	return buf.Bytes(), nil
}

// CardEvent is a user's click on a card a task's reply carried
// (WeCom's template_card_event).
type CardEvent struct {
	// TaskID is botctl's task whose reply carried the card.
	TaskID string `json:"task_id"`
	Bot    string `json:"bot"`
	Chat   string `json:"chat"`
	User   string `json:"user"`
	// CardTaskID is the card's task_id as the backend gave it ("" when it
	// gave none); EventKey is the key of the button clicked; Selected the
	// options chosen on a card with choices (see Event.Selected).
	CardTaskID string      `json:"card_task_id,omitempty"`
	EventKey   string      `json:"event_key"`
	Selected   []Selection `json:"selected,omitempty"`
	// Card is the card as it was sent.
	Card json.RawMessage `json:"card,omitempty"`
}

// CardResponder is a Backend that answers clicks on its cards. Optional:
// a backend that does not implement it leaves clicks unanswered.
type CardResponder interface {
	// CardEvent returns the card to show in place of the one clicked (a
	// template card's JSON object), or nil to leave it as it is. WeCom
	// takes the update only within 5 seconds of the click: answer fast.
	CardEvent(ctx context.Context, ev CardEvent) (json.RawMessage, error)
}
