package task_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/botctl/botctl/pkg/task"
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
