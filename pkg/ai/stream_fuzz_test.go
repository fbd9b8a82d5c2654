package ai

import (
	"context"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

// chunks reads data in reads of the sizes given (each 1 to 256 bytes,
// cycling), as a network body or a pipe hands it over.
type chunks struct {
	data  []byte
	sizes []byte
	i     int
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := 1 + 255/2
	if len(c.sizes) > 0 {
		n = 1 + int(c.sizes[c.i%len(c.sizes)])
		c.i++
	}
	n = min(n, len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// A text/plain answer, however its reads cut it: what is emitted is UTF-8,
// and is the body itself when the body is UTF-8 (a character split between
// reads is held back, not replaced).
func FuzzHTTPPlainBody(f *testing.F) {
	f.Add([]byte("你好，世界"), []byte{0, 1, 2})
	f.Add([]byte("a\xffb\xe4\xb8"), []byte{1})
	f.Add([]byte("😀😀"), []byte{0})
	f.Add([]byte(strings.Repeat("字", 100)), []byte{6, 0, 3})
	b := &httpBackend{web: web{name: "http:fuzz"}}
	f.Fuzz(func(t *testing.T, body, sizes []byte) {
		var got strings.Builder
		out := &recordEmit{emit: func(d string) error { got.WriteString(d); return nil }}
		if err := b.plain(&chunks{data: body, sizes: sizes}, out); err != nil {
			t.Fatalf("plain: %v", err)
		}
		if !utf8.ValidString(got.String()) {
			t.Fatalf("emitted bytes that are not UTF-8: %q", got.String())
		}
		if utf8.Valid(body) && got.String() != string(body) {
			t.Fatalf("emitted %q, want the body %q", got.String(), body)
		}
	})
}

// An event stream of any bytes ends in an answer or an error, never a
// panic, and what it emits is UTF-8.
func FuzzHTTPEvents(f *testing.F) {
	f.Add([]byte("data: {\"text\": \"你好\"}\n\ndata: {\"done\": true}\n\n"), []byte{3})
	f.Add([]byte(": comment\nevent: x\ndata: {\"text\": \"a\", \"reply\": {\"images\": [{\"name\": \"a.png\", \"data\": \"AAAA\"}]}}\n\n"), []byte{0})
	f.Add([]byte("data: {\"reply\": {\"card\": {\"card_type\": \"text_notice\"}}, \"done\": true}\n"), []byte{7})
	f.Add([]byte("data: not json\n"), []byte{1})
	b := &httpBackend{web: web{name: "http:fuzz"}}
	f.Fuzz(func(t *testing.T, body, sizes []byte) {
		var got strings.Builder
		out := &recordEmit{emit: func(d string) error { got.WriteString(d); return nil }}
		sink := &ReplySink{}
		_ = b.events(WithReplySink(context.Background(), sink), &chunks{data: body, sizes: sizes}, out)
		if !utf8.ValidString(got.String()) {
			t.Fatalf("emitted bytes that are not UTF-8: %q", got.String())
		}
		_ = sink.Reply()
	})
}
