package worker

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/task"
)

// coalescer accumulates deltas and writes the whole text at most once per
// interval (and only if it changed), so a backend emitting hundreds of
// tokens a second costs a few KV writes, and a backend that goes quiet
// still has its last words written within an interval (writeEvery).
// Those writes go to the progress bucket; flush, the attempt's last
// write, goes to the output bucket (task.OutputWriter.Final).
// Writes go through the attempt's fenced writer; the caller's failed hears
// of each failed write, periodic or the last (ErrSuperseded ends the run),
// but not of a periodic write the run's end (its context) cut short.
//
// The text is capped: once it would take more than max bytes in the
// output bucket (task.OutputTextBytes), it is cut there, between runes,
// note is appended, and add refuses every further delta with
// errAnswerCapped, which stops the backend's stream.
type coalescer struct {
	w    *task.OutputWriter
	max  int // stored bytes of the text, note excluded
	note string

	mu     sync.Mutex
	b      strings.Builder
	stored int // task.OutputTextBytes of b
	// thinking and tools: the backend's thinking (think), written with
	// the text, each at most task.MaxThinkingBytes as stored.
	thinking, tools clipped
	capped          bool
	dirty           bool
	wmu             sync.Mutex // one write at a time, in order

	asked chan struct{} // writeNow's request to writeEvery (one pending at most)
}

func newCoalescer(w *task.OutputWriter, max int, note string) *coalescer {
	return &coalescer{w: w, max: max, note: note, asked: make(chan struct{}, 1)}
}

// errAnswerCapped is add's answer once the text reached the cap: the
// backend stops, and the answer so far, with the note, is the answer.
var errAnswerCapped = errors.New("answer reached its cap (ai.max_answer_bytes)")

// writeEvery writes the text each interval, if it changed, and at once
// when asked (writeNow: the pusher's flush request), until ctx ends or
// stop is called; failed hears of a write that failed, unless ctx's end
// cut it short. One goroutine makes every such write, each bounded by
// storeCallTimeout: at most one is in flight, and none after stop. stop
// returns once the periodic writes have ended; then flush writes the last.
//
// stop lets a write in flight end; it does not cut it short. A write cut
// short by its context may still be applied by the server, and its
// revision is then unknown to the writer: the attempt's Retire, a delete
// at the revision the writer knows, failed ("wrong last sequence"), and
// the text in progress stayed until jetstream.ProgressTTL. The stream's
// end comes right after its last delta, so a periodic write was often in
// flight then (TestOutputIsCoalesced).
func (c *coalescer) writeEvery(ctx context.Context, clk clock.Clock, interval time.Duration, failed func(error)) (stop func()) {
	stopping := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := clk.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-stopping:
				return
			case <-t.C():
			case <-c.asked:
			}
			select {
			case <-stopping:
				return // stop and a tick at once: no write after stop
			default:
			}
			wctx, wcancel := context.WithTimeout(ctx, storeCallTimeout)
			err := c.write(wctx, false)
			wcancel()
			if err != nil && ctx.Err() == nil {
				failed(err)
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stopping) }); <-done }
}

// writeNow asks writeEvery for a write now (if the text changed since the
// last); it does not wait for it. Requests while one is pending are one.
func (c *coalescer) writeNow() {
	select {
	case c.asked <- struct{}{}:
	default:
	}
}

func (c *coalescer) add(delta string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.capped {
		return errAnswerCapped
	}
	if n := task.OutputTextBytes(delta); c.stored+n <= c.max {
		c.b.WriteString(delta)
		c.stored += n
		c.dirty = true
		return nil
	}
	fits, n := task.ClipOutputText(delta, c.max-c.stored)
	c.b.WriteString(fits)
	c.stored += n
	c.b.WriteString("\n\n" + c.note)
	c.capped, c.dirty = true, true
	return errAnswerCapped
}

// think adds a piece of the backend's thinking (ai.WithThinking's
// sink): a delta of reasoning, or a tool step as a line of its own in
// both the thinking and the tools. Past task.MaxThinkingBytes the rest
// is dropped (one "…" says so); the answer goes on.
func (c *coalescer) think(t ai.Thought) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.Tool == nil {
		c.dirty = c.thinking.add(t.Text) || c.dirty
		return
	}
	line := t.Tool.Line()
	c.dirty = c.thinking.add(lineOf(c.thinking.b.String(), line)) || c.dirty
	c.dirty = c.tools.add(lineOf(c.tools.b.String(), line)) || c.dirty
}

// lineOf is line as it follows text: on a line of its own, ended.
func lineOf(text, line string) string {
	if text != "" && !strings.HasSuffix(text, "\n") {
		return "\n" + line + "\n"
	}
	return line + "\n"
}

// clipped is a text kept to task.MaxThinkingBytes as stored.
type clipped struct {
	b      strings.Builder
	stored int
	full   bool
}

// add appends s, or what fits of it and "…"; it reports whether the
// text changed.
func (k *clipped) add(s string) bool {
	if k.full || s == "" {
		return false
	}
	room := task.MaxThinkingBytes - len("…") - k.stored // "…" always fits after
	if n := task.OutputTextBytes(s); n <= room {
		k.b.WriteString(s)
		k.stored += n
		return true
	}
	fits, n := task.ClipOutputText(s, room)
	k.b.WriteString(fits + "…")
	k.stored += n + len("…")
	k.full = true
	return true
}

// truncated reports whether the text was cut at the cap.
func (c *coalescer) truncated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.capped
}

func (c *coalescer) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// flush writes the text as the attempt's last write (the output bucket),
// unless there is nothing to write: no text since the start, or a last
// write already made; failed hears of a failure.
func (c *coalescer) flush(ctx context.Context, failed func(error)) error {
	err := c.write(ctx, true)
	if err != nil {
		failed(err)
	}
	return err
}

// write writes the text if it changed since the last write: to the
// progress bucket, or final to the output bucket (also when it did not
// change, if only the progress bucket has it).
func (c *coalescer) write(ctx context.Context, final bool) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if !c.dirty && !(final && c.w.InProgress()) {
		c.mu.Unlock()
		return nil
	}
	text := c.b.String()
	c.w.SetThinking(c.thinking.b.String(), c.tools.b.String())
	c.dirty = false
	c.mu.Unlock()
	write := c.w.Write
	if final {
		write = c.w.Final
	}
	if err := write(ctx, text); err != nil {
		c.mu.Lock()
		c.dirty = true
		c.mu.Unlock()
		return err
	}
	return nil
}

// retire drops the attempt's text in progress once its last write is
// made (task.OutputWriter.Retire).
func (c *coalescer) retire(ctx context.Context) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.w.Retire(ctx)
}

// finishWith ends the text with note ("" none) and makes the next write
// carry reply (nil none): the answer's last write. The note is not
// counted against the cap: it is a sentence, and the user must read it.
func (c *coalescer) finishWith(note string, reply *task.Reply) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if note != "" {
		if c.b.Len() > 0 {
			c.b.WriteString("\n\n")
		}
		c.b.WriteString(note)
		c.dirty = true
	}
	if reply != nil {
		c.w.SetReply(reply)
		c.dirty = true
	}
}
