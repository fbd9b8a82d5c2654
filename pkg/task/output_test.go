package task_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/botctl/botctl/internal/natscount"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/nats-io/nats.go"
)

// OutputTextBytes is exactly what the text takes in an Output's JSON, and
// ClipOutputText's prefix never exceeds its room: the worker's answer cap
// (ai.max_answer_bytes) counts with them, so that a capped answer always
// fits the output bucket's largest value.
func TestOutputTextBytesIsTheStoredLength(t *testing.T) {
	stored := func(s string) int {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		return b.Len() - len(`""`) - 1 // the quotes, Encode's newline
	}
	texts := []string{"", "plain", "<b>&amp;</b>", "引号\"和\\反斜杠", "line\nbreak\r\ttab\b\f", "\x00\x01\x1f", "\u2028\u2029", "bad \xff\xfe utf-8", strings.Repeat("答", 100)}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune{'a', '"', '\\', '\n', '\x00', '\x7f', 'é', '答', '\u2028', '😀', '<'}
	for range 200 {
		var b strings.Builder
		for range rng.IntN(40) {
			if rng.IntN(10) == 0 {
				b.WriteByte(byte(0x80 + rng.IntN(0x40))) // a stray continuation byte
				continue
			}
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		texts = append(texts, b.String())
	}
	for _, s := range texts {
		if got, want := task.OutputTextBytes(s), stored(s); got != want {
			t.Fatalf("OutputTextBytes(%q) = %d, JSON takes %d", s, got, want)
		}
		for room := 0; room <= len(s)*6; room += 3 {
			p, n := task.ClipOutputText(s, room)
			if !strings.HasPrefix(s, p) || n != stored(p) || n > room {
				t.Fatalf("ClipOutputText(%q, %d) = %q, %d (stored %d)", s, room, p, n, stored(p))
			}
			if p != s && n+task.OutputTextBytes(s[len(p):len(p)+1]) <= room && s[len(p)] < 0x80 {
				t.Fatalf("ClipOutputText(%q, %d) = %q: the next byte fits too", s, room, p)
			}
		}
	}
}

// An attempt's first output write reads nothing: the progress bucket's key
// is created at once (a read of a key that is not there was one request
// per answer for nothing). A second attempt, whose key exists, still
// reads it, and is still fenced.
func TestFirstOutputWriteReadsNothing(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	gets := countOutputGets(t, f)
	m := f.queue("m1", "alice")
	a1, _, err := f.lc.Start(f.ctx, m, "queue", 1)
	if err != nil {
		t.Fatal(err)
	}
	before := gets()
	w1 := f.lc.Output(m.TaskID, "b", a1)
	for _, s := range []string{"one", "one two", "one two three"} {
		if err := w1.Write(f.ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if n := gets() - before; n != 0 {
		t.Fatalf("three writes of a fresh task's output read the bucket %d times, want 0", n)
	}
	if o, _ := task.GetOutput(f.ctx, f.env.Store.Progress(), m.TaskID); o == nil || o.Text != "one two three" || o.Attempt != a1 {
		t.Fatalf("output = %+v", o)
	}

	// A later attempt finds the key there: it reads it, takes over, and
	// the earlier attempt's writer is fenced off.
	a2, _, err := f.lc.Start(f.ctx, m, "fixed", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.lc.Output(m.TaskID, "b", a2).Write(f.ctx, "second"); err != nil {
		t.Fatal(err)
	}
	if err := w1.Write(f.ctx, "one two three four"); !errors.Is(err, task.ErrSuperseded) {
		t.Fatalf("stale write: %v, want ErrSuperseded", err)
	}
	// A fresh writer of the earlier attempt (a worker that restarted it)
	// is refused too, though its first write tries a create.
	if err := f.lc.Output(m.TaskID, "b", a1).Write(f.ctx, "again"); !errors.Is(err, task.ErrSuperseded) {
		t.Fatalf("stale first write: %v, want ErrSuperseded", err)
	}
	if o, _ := task.GetOutput(f.ctx, f.env.Store.Progress(), m.TaskID); o == nil || o.Text != "second" || o.Attempt != a2 {
		t.Fatalf("output = %+v", o)
	}
}

// countOutputGets counts the reads of the progress and output buckets'
// keys (direct or through the stream API) that reach f's server.
func countOutputGets(t *testing.T, f *fixture) func() int {
	streams := []string{"KV_" + f.env.Store.Output().Bucket(), "KV_" + f.env.Store.Progress().Bucket()}
	return countOn(t, f, []string{"$JS.API.DIRECT.GET.>", "$JS.API.STREAM.MSG.GET.>"}, func(m *nats.Msg) bool {
		return strings.Contains(m.Subject, "."+streams[0]) || strings.Contains(m.Subject, "."+streams[1])
	})
}

// countOn counts the messages on subjects that match, as f's server sees
// them, on a connection of its own; the count it returns includes every
// message the store's connection sent before the call (natscount).
func countOn(t *testing.T, f *fixture, subjects []string, match func(*nats.Msg) bool) func() int {
	t.Helper()
	nc, err := nats.Connect(f.env.Server.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return natscount.New(t, nc, f.env.Conn, subjects, match).Load
}

// An answer in progress lives in the progress bucket (memory storage);
// the attempt's last write goes to the output bucket (disk) and drops
// the progress entry. A finished task's answer is read from the output
// bucket even once the progress bucket lost everything (all its servers
// restarted at once), a running one's text falls back to it, and a
// writer whose progress entry vanished writes again.
func TestAnswerOnDiskTextInProgressInMemory(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	store := f.env.Store
	read := func(id string, finished bool) string {
		t.Helper()
		o, err := task.ReadOutput(f.ctx, store, id, finished)
		if err != nil {
			t.Fatal(err)
		}
		if o == nil {
			return "<none>"
		}
		return o.Text
	}
	m := f.queue("m1", "alice")
	a, _, err := f.lc.Start(f.ctx, m, "queue", 1)
	if err != nil {
		t.Fatal(err)
	}
	w := f.lc.Output(m.TaskID, "b", a)
	if err := w.Write(f.ctx, "one"); err != nil {
		t.Fatal(err)
	}
	if got := read(m.TaskID, false); got != "one" {
		t.Fatalf("running: %q", got)
	}
	if got := read(m.TaskID, true); got != "one" {
		t.Fatalf("finished without a last write: %q, want the text in progress", got)
	}
	if o, _ := task.GetOutput(f.ctx, store.Output(), m.TaskID); o != nil {
		t.Fatalf("text in progress written to the output bucket: %+v", o)
	}
	if err := w.Final(f.ctx, "one two"); err != nil {
		t.Fatal(err)
	}
	if o, _ := task.GetOutput(f.ctx, store.Progress(), m.TaskID); o == nil || o.Text != "one" {
		t.Fatalf("progress before Retire: %+v", o)
	}
	w.Retire(f.ctx)
	if o, _ := task.GetOutput(f.ctx, store.Progress(), m.TaskID); o != nil {
		t.Fatalf("Retire left the progress entry: %+v", o)
	}
	if got := read(m.TaskID, true); got != "one two" {
		t.Fatalf("finished: %q", got)
	}
	if got := read(m.TaskID, false); got != "one two" {
		t.Fatalf("running, after the last write: %q", got)
	}

	// Another task's text in progress, then the progress bucket loses
	// everything.
	m2 := f.queue("m2", "bob")
	a2, _, err := f.lc.Start(f.ctx, m2, "queue", 1)
	if err != nil {
		t.Fatal(err)
	}
	w2 := f.lc.Output(m2.TaskID, "b", a2)
	if err := w2.Write(f.ctx, "x"); err != nil {
		t.Fatal(err)
	}
	st, err := store.JetStream().Stream(f.ctx, "KV_"+store.Names().ProgressBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got := read(m.TaskID, true); got != "one two" {
		t.Fatalf("finished, progress bucket lost: %q", got)
	}
	if err := w2.Write(f.ctx, "x y"); err != nil {
		t.Fatalf("a write after the progress bucket lost its entry: %v", err)
	}
	if got := read(m2.TaskID, false); got != "x y" {
		t.Fatalf("running, written again: %q", got)
	}
}
