package pusher

import (
	"strings"
	"unicode/utf8"
)

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

// runeCut is the largest index ≤ limit that is a rune boundary of s.
func runeCut(s string, limit int) int {
	i := limit
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
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
