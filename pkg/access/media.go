package access

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/limits"
	"github.com/botctl/botctl/pkg/media"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
)

// A message with files (an image, a file, a video, a mixed message's
// images, a quoted image or file) is handled as any question, with one
// step more before the dispatch: its files are downloaded, decrypted and
// stored in the media bucket (pkg/media) while WeCom's URLs still work,
// and the task carries their references.
//
// The download runs on the message's own handling goroutine, after it
// gave back its handling slot: it waits on the node's download slots
// (a conversation takes at most its share) under one deadline counted
// from the message's arrival, so a slow, stalled or huge file holds back
// nothing but its own message: the connection's reader, text messages
// and every other conversation go on. The message is recorded before
// the download (receiving.go), so a leader that dies mid-download leaves
// a record the next leader answers. The receipt does not wait
// for it: it is written before the download (as an early receipt is),
// so the user sees "received" at once; when the download fails, that
// stream is finished with the reason (too big and the limit, expired,
// corrupt, too slow), and when the dispatch then finds the conversation
// busy, with the busy reply. Nothing is dispatched for a failed
// download: the conversation is not locked, and its next message is
// answered as usual.

// supportedTypes are the message types that take a task.
func supportedType(t string) bool {
	switch t {
	case wecom.MsgTypeText, wecom.MsgTypeVoice, wecom.MsgTypeMixed, wecom.MsgTypeImage, wecom.MsgTypeFile, wecom.MsgTypeVideo:
		return true
	}
	return false
}

// clipType is a message type fit to quote in a reply: a callback's
// msgtype is WeCom's input, a bad one may be long or not UTF-8.
func clipType(t string) string {
	t = strings.ToValidUTF8(t, "?")
	if utf8.RuneCountInString(t) > 32 {
		t = string([]rune(t)[:32]) + "…"
	}
	return t
}

// maxQuoteBytes bounds the quoted text put before a question.
const maxQuoteBytes = 1000

// withQuote puts the text of the message m quotes (text, voice, the text
// parts of a mixed one) before question, as a markdown quote: the model
// sees what the user is asking about.
func withQuote(m *wecom.MsgCallback, question string) string {
	q := m.Quote
	if q == nil {
		return question
	}
	var text string
	switch q.MsgType {
	case wecom.MsgTypeText:
		if q.Text != nil {
			text = q.Text.Content
		}
	case wecom.MsgTypeVoice:
		if q.Voice != nil {
			text = q.Voice.Content
		}
	case wecom.MsgTypeMixed:
		text = (&wecom.MsgCallback{MsgType: wecom.MsgTypeMixed, Mixed: q.Mixed}).PlainText()
	}
	text = strings.TrimSpace(text)
	if text == "" {
		return question
	}
	if len(text) > maxQuoteBytes {
		cut := maxQuoteBytes
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "…"
	}
	var sb strings.Builder
	for _, line := range strings.Split(text, "\n") {
		sb.WriteString("> ")
		sb.WriteString(line)
		sb.WriteString("\n")
	}
	if question != "" {
		sb.WriteString("\n")
		sb.WriteString(question)
	}
	return strings.TrimSpace(sb.String())
}

// mediaUnavailable is the reply to a message with files while JetStream
// is away: there is nowhere to keep them for a worker.
const mediaUnavailable = "系统正在恢复中，暂时无法接收图片和文件，请稍后重新发送。文字消息不受影响。"

// attachments downloads and stores h's files, if it has any, and returns
// their references; ok false when the message was answered instead (a
// duplicate, a failed download, JetStream away). question is the task's:
// the record written before the download carries it (receiving.go).
func (h *handling) attachments(question string) (atts []task.Attachment, ok bool) {
	items := media.Items(h.m)
	if len(items) == 0 {
		return nil, true
	}
	if h.js == nil {
		h.a.count(func(s *Stats) { s.MediaFailed++ })
		h.log.Warn().Int("files", len(items)).Msg("message with files while JetStream is away: refused")
		h.replyAnyway(mediaUnavailable)
		return nil, false
	}
	// A duplicate is not downloaded again (a fresh message cannot be one).
	if h.duplicate() {
		return nil, false
	}
	if h.in.early == nil {
		// The receipt before the download, as an early one: the task's
		// own stream, continued by the pusher or finished below.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.a.cfg.Timeout)
		e := &earlyReceipt{sent: time.Now()}
		e.p, e.err = h.c.SendStream(sctx, h.reqID, wecom.Stream{ID: "s-" + h.id, Content: h.rules.Texts.Receipt, Feedback: feedbackOf(h.id)})
		cancel()
		h.in.early = e
	}
	// A user (or bot) at its day's bytes is not downloaded for.
	if h.overBytes(0) {
		return nil, false
	}
	h.receive(question)
	// The download waits on the media slots under the message's deadline,
	// not on a handling slot: text goes on meanwhile.
	h.slot.free()
	t0 := time.Now()
	fctx, cancel := h.downloadContext()
	atts, err := h.a.cfg.Media.Fetch(fctx, h.js.store.Media(), media.Batch{TaskID: h.id, Conversation: h.term.Bot + "\x00" + h.chat, Arrived: h.in.read, Items: items})
	cancel()
	h.stage("media", time.Since(t0))
	// The download may have used up the handling's time: what follows
	// gets its own.
	h.renew()
	if err != nil {
		h.mediaFailed(err)
		return nil, false
	}
	var bytes int64
	for _, a := range atts {
		bytes += a.Size
	}
	if h.overBytes(bytes) {
		h.dropFiles(atts)
		return nil, false
	}
	h.log.Info().Int("files", len(atts)).Int64("bytes", bytes).Dur("took", time.Since(t0)).Msg("files stored")
	return atts, true
}

// errDraining ends a download still running MediaDrain after its term.
var errDraining = errors.New("the node stopped leading the bot while the files were downloaded")

// downloadContext is the context of h's download: it ends MediaDrain
// after h's term does, so the node's drain sees the handling end (the
// user is then told, or the refusal recorded for the next leader).
func (h *handling) downloadContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(h.ctx))
	var mu sync.Mutex
	var timer clock.Timer
	stop := context.AfterFunc(h.term.Context(), func() {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() == nil {
			timer = h.a.cfg.Clock.AfterFunc(h.a.cfg.MediaDrain, func() { cancel(errDraining) })
		}
	})
	return ctx, func() {
		stop()
		cancel(nil)
		mu.Lock()
		defer mu.Unlock()
		if timer != nil {
			timer.Stop()
		}
	}
}

// dropFiles removes the stored files of a message that takes no task
// (its conversation was busy, or no tier took it), best effort: the
// store's TTL removes what this misses. Not for a duplicate: its files
// are the first delivery's task's, under the same keys.
func (h *handling) dropFiles(atts []task.Attachment) {
	if len(atts) == 0 || h.js == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.a.cfg.Timeout)
	defer cancel()
	keys := make([]string, len(atts))
	for i, a := range atts {
		keys[i] = a.Key
	}
	if err := h.js.store.DeleteMedia(ctx, keys...); err != nil {
		h.log.Debug().Err(err).Msg("files of a message without a task not all removed; the media TTL will")
	}
	if h.admittedBytes > 0 {
		if err := h.js.limits.ReleaseBytes(ctx, h.term.Bot, h.m.From.UserID, h.admittedBytes, h.rules.Limits); err != nil {
			h.log.Warn().Err(err).Msg("limits: the bytes of files that ran no task still counted")
		}
		h.admittedBytes = 0
	}
}

// overBytes counts n bytes of the message's files against its bot's
// byte limits (limits.bytes_per_day; n 0: are any more admitted?) and
// reports whether the message was refused for them: its user told, no
// task, the conversation free. As with every limit, when the counts
// cannot be read or written the files are admitted.
func (h *handling) overBytes(n int64) bool {
	l := h.rules.Limits
	if !l.Bytes() {
		return false
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.a.cfg.Timeout)
	over, err := h.js.limits.AdmitBytes(lctx, h.term.Bot, h.m.From.UserID, n, l)
	cancel()
	if err != nil {
		h.log.Warn().Err(err).Msg("limits: files' bytes not counted (JetStream): admitted")
		return false
	}
	if over == "" {
		h.admittedBytes += n
		return false
	}
	a := h.a
	a.count(func(s *Stats) { s.Limited++ })
	if a.cfg.Metrics != nil {
		a.cfg.Metrics.LimitRefused(h.term.Bot, over)
	}
	h.log.Info().Str("user", h.m.From.UserID).Str("limit", over).Int64("bytes", n).Msg("files over a byte limit; refused, no task")
	text := botBytesLimitText
	if over == limits.UserBytesPerDay {
		text = fmt.Sprintf(userBytesLimitText, media.FormatBytes(l.User.BytesPerDay))
	}
	h.filesRefused(text)
	return true
}

// The replies to files over a byte limit (limits.user.bytes_per_day,
// limits.bot.bytes_per_day).
const (
	userBytesLimitText = "抱歉，你今天发送的图片和文件已达上限（%s），未能接收。请明天再发送；文字消息不受影响。"
	botBytesLimitText  = "抱歉，今天接收的图片和文件已达上限，未能接收。请明天再发送；文字消息不受影响。"
)

// renew gives the rest of the handling a fresh Timeout.
func (h *handling) renew() {
	if h.cancel != nil {
		h.cancel()
	}
	h.ctx, h.cancel = context.WithTimeout(context.WithoutCancel(h.ctx), h.a.cfg.Timeout)
}

// mediaFailed finishes the receipted stream with why the files could
// not be taken. No task is dispatched: the conversation stays free.
func (h *handling) mediaFailed(err error) {
	a := h.a
	a.count(func(s *Stats) { s.MediaFailed++ })
	text := (&media.Error{Reason: media.ReasonUnreachable}).Reply()
	var me *media.Error
	if errors.As(err, &me) {
		text = me.Reply()
	}
	h.log.Warn().Err(err).Msg("files not taken; the user is told why")
	h.filesRefused(text)
}

// filesRefused finishes the receipted stream of a message whose files
// were not taken with text (why). No task is dispatched, and the message
// is taken back out of its bot's message counts.
func (h *handling) filesRefused(text string) {
	h.unadmit()
	rcpt := h.earlyReceipt(h.in.early)
	opened := rcpt.err == nil || errors.Is(rcpt.err, wecom.ErrAckUnknown)
	if rcpt.err == nil {
		h.spent() // the receipt
	}
	h.spent() // the reason (refunded if WeCom refuses it)
	var err error
	if opened {
		err = h.finishOn("s-"+h.id, text)
	} else {
		err = h.send(text)
	}
	if h.receiving && wecom.IsConnectionError(err) && !errors.Is(err, wecom.ErrAckUnknown) {
		// The connection is gone (the term ended mid-download): the
		// record says it failed, and the next leader's pusher tells
		// the user (settleReceiving).
		h.owed = text
		return
	}
	h.markSeen()
}
