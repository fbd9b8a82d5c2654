package pusher

// What the user reads around an answer: the notes and the quote.

import (
	"cmp"
	"strings"

	"github.com/botctl/botctl/pkg/task"
)

// finalText is what the user should end up with, once r's execution is
// over and text is its attempt's output.
func (p *Pusher) finalText(r *task.Record, text string) string {
	late, busy := p.cfg.LateNote, p.cfg.BusyNote
	if p.cfg.Notes != nil {
		l, b := p.cfg.Notes.Notes(p.cfg.Bot)
		late, busy = cmp.Or(l, late), cmp.Or(b, busy)
	}
	switch r.Exec {
	case task.Canceled:
		text = join(text, p.cfg.CanceledNote)
	case task.Failed:
		switch {
		case r.Busy:
			text = join(text, busy)
		case r.Refusal != "":
			text = join(text, r.Refusal)
		default:
			text = join(text, p.cfg.FailedNote)
		}
	}
	if r.Incomplete != "" {
		text = join(p.cfg.IncompleteNote, text)
	}
	if r.Late {
		return join(late, text)
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
