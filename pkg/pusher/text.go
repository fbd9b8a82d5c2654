package pusher

// What the user reads around an answer: the notes and the quote.

import (
	"strings"

	"github.com/botctl/botctl/pkg/task"
)

// finalText is what the user should end up with, once r's execution is
// over and text is its attempt's output.
func (p *Pusher) finalText(r *task.Record, text string) string {
	switch r.Exec {
	case task.Canceled:
		text = join(text, p.cfg.CanceledNote)
	case task.Failed:
		if r.Busy {
			text = join(text, p.cfg.BusyNote)
		} else {
			text = join(text, p.cfg.FailedNote)
		}
	}
	if r.Incomplete != "" {
		text = join(p.cfg.IncompleteNote, text)
	}
	if r.Late {
		return join(p.cfg.LateNote, text)
	}
	return text
}

// quote is question as a markdown quote of one line, clipped.
func quote(question string) string {
	q := strings.Join(strings.Fields(question), " ")
	return "> " + Clip(q, 300, "…")
}

func join(text, note string) string {
	if text == "" {
		return note
	}
	return text + "\n\n" + note
}
