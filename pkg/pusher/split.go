package pusher

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Parts is the one splitter of every reply too long for one frame (WeCom
// takes at most wecom.MaxContentBytes): text cut by Split into n parts of
// at most limit bytes each, its label included, each part but a lone one
// starting with the label "(i/n)" on a line of its own. The stream's
// final frame carries the first part and pushes the rest; an answer owed
// by push (the window closed, another term's stream, a device without
// streams) is pushed as all n. A text that fits is one part, unlabelled.
func Parts(text string, limit int) []string {
	if len(text) <= limit {
		return []string{text}
	}
	for digits := 1; ; digits++ {
		// The widest label of up to digits-digit counts: "(99/99)\n\n".
		width := 2*digits + len("(/)\n\n")
		parts := Split(text, limit-width)
		if len(parts) < pow10(digits) {
			for i := range parts {
				parts[i] = label(i+1, len(parts)) + parts[i]
			}
			return parts
		}
	}
}

// label is part i of n's first line.
func label(i, n int) string { return fmt.Sprintf("(%d/%d)\n\n", i, n) }

func pow10(d int) int {
	n := 1
	for range d {
		n *= 10
	}
	return n
}

// Split cuts text into parts of at most limit bytes, at paragraph
// boundaries ("\n\n") where it can, else at line ends, else at rune
// boundaries: never inside a UTF-8 character. Joining the parts with the
// separators they were cut at gives the text back.
func Split(text string, limit int) []string {
	limit = max(limit, utf8.UTFMax)
	if len(text) <= limit {
		return []string{text}
	}
	var parts []string
	for len(text) > limit {
		cut := lastCut(text[:limit+1], "\n\n")
		sep := 2
		if cut <= 0 {
			cut, sep = lastCut(text[:limit+1], "\n"), 1
		}
		if cut <= 0 {
			cut, sep = runeCut(text, limit), 0
		}
		parts = append(parts, text[:cut])
		text = text[cut+sep:]
	}
	if text != "" {
		parts = append(parts, text)
	}
	return parts
}

// lastCut is the index of the last sep in s such that the part before it
// is not empty, or -1.
func lastCut(s, sep string) int {
	i := strings.LastIndex(s, sep)
	if i <= 0 {
		return -1
	}
	return i
}

// runeCut is the largest index ≤ limit that is a rune boundary of s: at
// most utf8.UTFMax-1 bytes back in UTF-8. Where no byte that far back
// starts a character (s is not UTF-8 there), there is no character to
// cut inside, and it is limit itself: backing further could reach 0, and
// Split would cut nothing, forever.
func runeCut(s string, limit int) int {
	for i := limit; i >= 0 && i > limit-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			return i
		}
	}
	return limit
}

// Clip returns text cut to at most limit bytes on a rune boundary, keeping
// room for suffix, which is appended when text had to be cut.
func Clip(text string, limit int, suffix string) string {
	if len(text) <= limit {
		return text
	}
	keep := limit - len(suffix)
	if keep < 0 {
		keep = 0
	}
	return text[:runeCut(text, keep)] + suffix
}
