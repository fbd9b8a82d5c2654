package pusher_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/botctl/botctl/pkg/pusher"
)

// splitSeeds are texts the splitters meet: paragraphs, lines, wide runes,
// and bytes that are not UTF-8 (which answers do not carry today: the
// output bucket's JSON replaces them).
var splitSeeds = []struct {
	text  string
	limit int
}{
	{"a\n\nb\n\nc", 4},
	{"aaaa\nbbbb\ncccc", 9},
	{strings.Repeat("字", 10), 7},
	{"short", 100},
	{strings.Repeat("\x80", 100), 10},
	{"a" + strings.Repeat("\xbf", 40) + "b", 8},
	{"\n\n\n\n\n\n\n\n", 4},
	{strings.Repeat("字\n", 30), 5},
}

// Split never loops or loses text, whatever the bytes: every part within
// the limit and not empty, the parts in order and, joined with the
// separators cut at, the text again; a valid UTF-8 text is never cut
// inside a character.
func FuzzSplit(f *testing.F) {
	for _, s := range splitSeeds {
		f.Add(s.text, s.limit)
	}
	f.Fuzz(func(t *testing.T, text string, limit int) {
		limit = limitFor(limit)
		parts := pusher.Split(text, limit)
		for i, p := range parts {
			if len(p) > max(limit, utf8.UTFMax) {
				t.Fatalf("part %d of %d is %d bytes, limit %d", i, len(parts), len(p), limit)
			}
			if p == "" && len(parts) > 1 {
				t.Fatalf("part %d of %d is empty: %q", i, len(parts), parts)
			}
			if utf8.ValidString(text) && !utf8.ValidString(p) {
				t.Fatalf("part %d cut inside a character: %q", i, p)
			}
		}
		if !rejoins(text, parts, map[[2]int]bool{}) {
			t.Fatalf("the parts joined with \n\n, \n or nothing are not the text: %q", parts)
		}
	})
}

// rejoins reports whether text is parts[0], a separator ("\n\n", "\n" or
// none), parts[1], and so on (a last separator may end it); seen memoizes the (part, offset) pairs that
// do not.
func rejoins(text string, parts []string, seen map[[2]int]bool) bool {
	return rejoinsAt(text, 0, parts, 0, seen)
}

func rejoinsAt(text string, off int, parts []string, i int, seen map[[2]int]bool) bool {
	if i == len(parts) {
		return off == len(text)
	}
	if seen[[2]int{i, off}] || !strings.HasPrefix(text[off:], parts[i]) {
		return false
	}
	next := off + len(parts[i])
	if i == len(parts)-1 { // a separator cut at the very end has no part after it
		rest := text[next:]
		return rest == "" || rest == "\n" || rest == "\n\n"
	}
	for _, sep := range []string{"", "\n", "\n\n"} {
		if strings.HasPrefix(text[next:], sep) && rejoinsAt(text, next+len(sep), parts, i+1, seen) {
			return true
		}
	}
	seen[[2]int{i, off}] = true
	return false
}

// Parts' parts fit the limit, labels included, and carry the whole text.
func FuzzParts(f *testing.F) {
	for _, s := range splitSeeds {
		f.Add(s.text, s.limit)
	}
	f.Fuzz(func(t *testing.T, text string, limit int) {
		limit = 32 + limitFor(limit)
		parts := pusher.Parts(text, limit)
		kept := 0
		for i, p := range parts {
			if len(p) > limit {
				t.Fatalf("part %d of %d is %d bytes, limit %d", i, len(parts), len(p), limit)
			}
			kept += len(p)
		}
		if len(parts) == 1 && parts[0] != text {
			t.Fatalf("one part %q, want the text %q", clipFuzz(parts[0]), clipFuzz(text))
		}
		if kept < len(text)-2*len(parts) {
			t.Fatalf("%d parts hold %d bytes of a %d-byte text", len(parts), kept, len(text))
		}
	})
}

// Clip keeps a prefix of the text and the suffix, within the limit.
func FuzzClip(f *testing.F) {
	for _, s := range splitSeeds {
		f.Add(s.text, s.limit, "…")
	}
	f.Fuzz(func(t *testing.T, text string, limit int, suffix string) {
		limit = limitFor(limit)
		got := pusher.Clip(text, limit, suffix)
		if len(text) <= limit {
			if got != text {
				t.Fatalf("Clip of a fitting text = %q", got)
			}
			return
		}
		body, ok := strings.CutSuffix(got, suffix)
		if !ok || !strings.HasPrefix(text, body) {
			t.Fatalf("Clip(%q, %d, %q) = %q: not a prefix and the suffix", clipFuzz(text), limit, suffix, got)
		}
		if len(suffix) <= limit && len(got) > limit {
			t.Fatalf("Clip = %d bytes, limit %d", len(got), limit)
		}
		if utf8.ValidString(text) && !utf8.ValidString(body) {
			t.Fatalf("Clip cut inside a character: %q", body)
		}
	})
}

// limitFor maps any int to a limit of 1 to 4,096 bytes.
func limitFor(n int) int {
	if n < 0 {
		n = -(n + 1)
	}
	return 1 + n%4096
}

func clipFuzz(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
