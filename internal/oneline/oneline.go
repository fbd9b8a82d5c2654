// Package oneline fits user text (a question, a reason) into one cell of a
// table or list: the CLI's tables and the demo page's task list.
package oneline

import "strings"

// Clip returns s on one line (each newline becomes a space), cut to at most
// n runes and ending in "…" when it was cut. It counts runes, not bytes,
// so a Chinese question is never cut inside a character.
func Clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
