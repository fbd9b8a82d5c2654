package task

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/schema"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Output is what an attempt has produced for a task: the accumulated
// answer so far, written under the task's id, coalesced (at most once per
// worker.output_interval) to the progress bucket while the attempt runs,
// and its last write to the output bucket. The pusher watches the
// progress bucket and reads the answer from the output bucket. Whether
// the answer is over is the record's to say (Exec.Finished), not the
// output's: the output is text, and the attempt that wrote it.
type Output struct {
	TaskID  string    `json:"task_id"`
	Bot     string    `json:"bot"`
	Text    string    `json:"text"`
	Attempt int       `json:"attempt"`
	Updated time.Time `json:"updated"`
	// Reply is the rich part of the answer (images, files, a card), set
	// with the attempt's last write, once its text is complete.
	Reply *Reply `json:"reply,omitempty"`
	// Thinking is what the model reasoned on its way to the answer so
	// far, each tool step a line of its own ("🔧 search: done"); Tools
	// is those tool lines alone. Both at most MaxThinkingBytes as
	// stored (OutputTextBytes). Written with the text (the pusher shows
	// them folded before it, per the bot's ai.show_thinking); a node that
	// does not know them ignores them.
	Thinking string `json:"thinking,omitempty"`
	Tools    string `json:"tools,omitempty"`
}

// MaxThinkingBytes bounds Output's Thinking, and its Tools, as stored
// (OutputTextBytes): with the text at its largest
// (config.MaxAnswerBytesLimit) the Output stays under NATS's max_payload
// of 1 MiB.
const MaxThinkingBytes = 16 << 10

// OutputWriter writes one attempt's output, fenced: once a later attempt
// of the task has written to a bucket, a write there returns
// ErrSuperseded and writes nothing, so the user never sees two attempts'
// text interleaved. Write puts the text so far in the progress bucket
// (memory: a whole server restart loses it, and the next write puts it
// back); Final puts the attempt's last text in the output bucket (disk);
// Retire then deletes the attempt's progress entry.
type OutputWriter struct {
	progress, output fencedKey
	id, bot          string
	attempt          int
	now              func() time.Time // the clock of each write's time (the lifecycle's)
	reply            *Reply           // written with every write once set (SetReply)
	thinking, tools  string           // written with every write (SetThinking)
	final            bool             // Final wrote the text last (not Write)
}

// fencedKey is the task's key in one bucket, as one writer wrote it.
type fencedKey struct {
	kv    natsjs.KeyValue
	rev   uint64 // revision of this writer's last write (0: none yet)
	tried bool   // the first write's create was tried
}

// SetReply makes every later Write carry reply.
func (w *OutputWriter) SetReply(reply *Reply) { w.reply = reply }

// SetThinking makes every later write carry thinking and tools (Output's
// Thinking and Tools).
func (w *OutputWriter) SetThinking(thinking, tools string) { w.thinking, w.tools = thinking, tools }

// Output is the fenced output writer of attempt of task id.
func (l *Lifecycle) Output(id, bot string, attempt int) *OutputWriter {
	return &OutputWriter{progress: fencedKey{kv: l.store.Progress()}, output: fencedKey{kv: l.store.Output()},
		id: id, bot: bot, attempt: attempt, now: l.now}
}

// Write replaces the attempt's text in progress with text. The value stored is the
// Output's JSON: about OutputTextBytes(text) and 200 bytes more, which
// must stay under the buckets' largest value (NATS's max_payload,
// 1 MiB by default); the worker caps an answer so that it does
// (ai.max_answer_bytes).
func (w *OutputWriter) Write(ctx context.Context, text string) error {
	raw, err := w.encode(text)
	if err != nil {
		return err
	}
	if err := w.progress.write(ctx, w.id, w.attempt, raw); err != nil {
		return err
	}
	w.final = false
	return nil
}

// Final writes text as the attempt's output, its answer as it ended, to
// the output bucket. The pusher reads a finished task's answer from the
// output bucket.
func (w *OutputWriter) Final(ctx context.Context, text string) error {
	raw, err := w.encode(text)
	if err != nil {
		return err
	}
	if err := w.output.write(ctx, w.id, w.attempt, raw); err != nil {
		return err
	}
	w.final = true
	return nil
}

// Retire drops the attempt's entry in the progress bucket once Final
// wrote its text: only this writer's own last write (a later attempt's
// text in progress stays). It is memory's hygiene, not the answer's
// path: the worker calls it after the record says the answer is over,
// and an entry it fails to drop expires after jetstream.ProgressTTL.
func (w *OutputWriter) Retire(ctx context.Context) {
	if !w.final || w.progress.rev == 0 {
		return
	}
	_ = w.progress.kv.Delete(ctx, w.id, natsjs.LastRevision(w.progress.rev))
	w.progress.rev = 0
}

// InProgress reports whether the progress bucket holds a text of this
// writer's that no Final has followed yet.
func (w *OutputWriter) InProgress() bool { return w.progress.rev > 0 && !w.final }

func (w *OutputWriter) encode(text string) ([]byte, error) {
	return encodeOutput(Output{TaskID: w.id, Bot: w.bot, Text: text, Attempt: w.attempt, Updated: w.now().UTC(), Reply: w.reply,
		Thinking: w.thinking, Tools: w.tools})
}

// write puts raw under id in k's bucket unless a later attempt than
// attempt wrote there (ErrSuperseded).
func (k *fencedKey) write(ctx context.Context, id string, attempt int, raw []byte) error {
	if !k.tried {
		// An attempt's first write: usually the task's first attempt,
		// with no output yet, so create without reading the key first
		// (one JetStream request less per answer). Only when the key is
		// there (an earlier or a later attempt's output) is it read below,
		// to learn whose it is.
		k.tried = true
		rev, err := k.kv.Create(ctx, id, raw)
		switch {
		case err == nil:
			k.rev = rev
			return nil
		case !jetstream.LostCAS(err):
			return fmt.Errorf("write output of task %s: %w", id, err)
		}
	}
	for try := 0; try < 30; try++ {
		jetstream.CASPause(ctx, try)
		if k.rev == 0 {
			// First write, or another writer came between: read who.
			e, err := k.kv.Get(ctx, id)
			switch {
			case errors.Is(err, natsjs.ErrKeyNotFound):
				rev, err := k.kv.Create(ctx, id, raw)
				if jetstream.LostCAS(err) {
					continue
				}
				if err != nil {
					return fmt.Errorf("write output of task %s: %w", id, err)
				}
				k.rev = rev
				return nil
			case err != nil:
				return fmt.Errorf("write output of task %s: %w", id, err)
			}
			cur, err := DecodeOutput(e.Value())
			if err == nil && cur.Attempt > attempt {
				return fmt.Errorf("%w: output of task %s is attempt %d's, this is %d", ErrSuperseded, id, cur.Attempt, attempt)
			}
			k.rev = e.Revision()
		}
		rev, err := k.kv.Update(ctx, id, raw, k.rev)
		if jetstream.LostCAS(err) {
			k.rev = 0
			continue
		}
		if err != nil {
			return fmt.Errorf("write output of task %s: %w", id, err)
		}
		k.rev = rev
		return nil
	}
	return fmt.Errorf("write output of task %s: too many concurrent writers", id)
}

// encodeOutput is o's JSON without HTML escaping: '<', '>' and '&' (code,
// markup) take one byte each instead of six.
func encodeOutput(o Output) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(o); err != nil {
		return nil, err
	}
	return schema.Stamp(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// OutputTextBytes is how many bytes text takes in the output bucket, as
// the Text of an Output's JSON: what encoding/json writes for it, without
// the quotes. Its UTF-8 length, that is, plus one for each '"', '\\',
// newline, carriage return, tab, backspace and form feed, five for any
// other control character and for each byte that is not UTF-8 (written
// \ufffd), three for U+2028 and U+2029.
func OutputTextBytes(text string) int {
	n := 0
	for len(text) > 0 {
		r, size := utf8.DecodeRuneInString(text)
		n += storedRune(r, size)
		text = text[size:]
	}
	return n
}

// ClipOutputText is the longest prefix of text whose OutputTextBytes is at
// most room, cut between runes, and its OutputTextBytes.
func ClipOutputText(text string, room int) (string, int) {
	n, end := 0, 0
	for end < len(text) {
		r, size := utf8.DecodeRuneInString(text[end:])
		k := storedRune(r, size)
		if n+k > room {
			break
		}
		n += k
		end += size
	}
	return text[:end], n
}

// storedRune is what encoding/json (HTML escaping off) writes for the rune
// r of size bytes.
func storedRune(r rune, size int) int {
	switch {
	case r == utf8.RuneError && size == 1:
		return len(`\ufffd`)
	case r == '"', r == '\\', r == '\n', r == '\r', r == '\t', r == '\b', r == '\f':
		return 2
	case r < 0x20, r == '\u2028', r == '\u2029':
		return len(`\u0000`)
	}
	return size
}

// OutputBuckets are the two buckets a task's output is read from
// (*jetstream.Store): the text in progress and the attempt's last write.
type OutputBuckets interface {
	Progress() natsjs.KeyValue
	Output() natsjs.KeyValue
}

// ReadOutput reads task id's output from the store: while the task runs
// its text in progress, once it is finished (Exec.Finished) the answer in
// the output bucket, each falling back to the other bucket when it has
// none (an attempt that ended without its last write; a worker of an
// earlier botctl, which wrote every version to the output bucket).
// (nil, nil) if neither has any.
func ReadOutput(ctx context.Context, s OutputBuckets, id string, finished bool) (*Output, error) {
	o, _, err := ReadOutputFrom(ctx, s, id, finished)
	return o, err
}

// ReadOutputFrom is ReadOutput, and whether the output bucket answered
// (last: an attempt's last write, or an earlier botctl's version) rather
// than the progress bucket.
func ReadOutputFrom(ctx context.Context, s OutputBuckets, id string, finished bool) (o *Output, last bool, err error) {
	first, then := s.Progress(), s.Output()
	if finished {
		first, then = then, first
	}
	if o, err = GetOutput(ctx, first, id); o != nil || err != nil {
		return o, finished, err
	}
	o, err = GetOutput(ctx, then, id)
	return o, !finished, err
}

// GetOutput reads a task's output from one bucket; (nil, nil) if there is none yet.
func GetOutput(ctx context.Context, kv natsjs.KeyValue, id string) (*Output, error) {
	e, err := kv.Get(ctx, id)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read output of task %s: %w", id, err)
	}
	return DecodeOutput(e.Value())
}

// DecodeOutput parses a value of the output bucket.
func DecodeOutput(raw []byte) (*Output, error) {
	if err := schema.Check(KindOutput, raw); err != nil {
		return nil, err
	}
	var o Output
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, fmt.Errorf("corrupt output: %w", err)
	}
	return &o, nil
}

// Message is the task stream's message: everything a worker needs to run
// the task even if its record is not (yet) in the bucket.
type Message struct {
	TaskID   string    `json:"task_id"`
	Bot      string    `json:"bot"`
	MsgID    string    `json:"msgid"`
	ReqID    string    `json:"req_id,omitempty"`
	TermRev  int64     `json:"term,omitempty"`
	StreamID string    `json:"stream_id,omitempty"`
	Chat     string    `json:"chat"`
	ChatType string    `json:"chat_type"`
	User     string    `json:"user"`
	Question string    `json:"question"`
	Received time.Time `json:"received"`
	Late     bool      `json:"late,omitempty"`
	// Incomplete: see Record.Incomplete.
	Incomplete string `json:"incomplete,omitempty"`
	// Attachments: see Record.Attachments.
	Attachments []Attachment `json:"attachments,omitempty"`
	// Click: see Record.Click.
	Click *Click `json:"click,omitempty"`
}

// MessageOf is r's task message.
func MessageOf(r *Record) Message {
	return Message{TaskID: r.ID, Bot: r.Bot, MsgID: r.MsgID, ReqID: r.ReqID, TermRev: r.TermRev, StreamID: r.StreamID,
		Chat: r.Chat, ChatType: r.ChatType, User: r.User, Question: r.Question, Received: r.Received, Late: r.Late,
		Incomplete: r.Incomplete, Attachments: r.Attachments, Click: r.Click}
}

// RecordOf rebuilds a record from a task message (the raw context a worker
// has when the leader's record write has not landed).
func RecordOf(m Message) *Record {
	r := New(m.Bot, m.MsgID, m.Received)
	r.Chat, r.ChatType, r.User, r.Question = m.Chat, m.ChatType, m.User, m.Question
	r.ReqID, r.TermRev, r.StreamID, r.Late, r.Incomplete = m.ReqID, m.TermRev, m.StreamID, m.Late, m.Incomplete
	r.Attachments, r.Click = m.Attachments, m.Click
	return r
}

// Hash identifies content the user has seen, so a new leader does not
// resend what is already on the user's screen.
func Hash(content string) string {
	h := sha256.Sum256([]byte(content))
	return hex.EncodeToString(h[:8])
}
