package pusher

import (
	"testing"

	"github.com/botctl/botctl/pkg/task"
)

type botNotes map[string][2]string

func (n botNotes) Notes(bot string) (late, busy string) { return n[bot][0], n[bot][1] }

// A bot's own late note and busy reply (its settings, which change at run
// time) are asked each time one is shown; a bot without them has the
// pusher's.
func TestNotesAreTheBotsOwn(t *testing.T) {
	t.Parallel()
	notes := botNotes{"b1": {"b1 late", "b1 busy"}}
	for _, tc := range []struct {
		bot        string
		late, busy string
	}{{"b1", "b1 late\n\nanswer", "b1 busy"}, {"b2", "default late\n\nanswer", "default busy"}} {
		c := Config{Bot: tc.bot, LateNote: "default late", BusyNote: "default busy", Notes: notes}
		c.setDefaults()
		p := &Pusher{cfg: c}
		if got := p.finalText(&task.Record{Late: true, Exec: task.Succeeded}, "answer"); got != tc.late {
			t.Errorf("%s late: %q, want %q", tc.bot, got, tc.late)
		}
		if got := p.finalText(&task.Record{Busy: true, Exec: task.Failed}, ""); got != tc.busy {
			t.Errorf("%s busy: %q, want %q", tc.bot, got, tc.busy)
		}
	}
	notes["b1"] = [2]string{"changed late", ""}
	c := Config{Bot: "b1", Notes: notes}
	c.setDefaults()
	if got := (&Pusher{cfg: c}).finalText(&task.Record{Late: true, Exec: task.Succeeded}, "a"); got != "changed late\n\na" {
		t.Errorf("after a change: %q", got)
	}
}
