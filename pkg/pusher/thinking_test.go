package pusher_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// showThinking is a pusher.Thinking whose value a test sets.
type showThinking struct{ v atomic.Value }

func (s *showThinking) ShowThinking(string) string { v, _ := s.v.Load().(string); return v }

// A backend's thinking is shown as WeCom folds it: a <think> block,
// closed, at the head of the stream's content, before the answer proper
// (the model's reasoning and tool steps with show_thinking true, the tool
// steps alone with tools, nothing with false). While only thinking is
// written it is the content of the paced progress frames, not frames of
// its own: twenty versions over 1.5 s are one frame.
func TestThinkingShownFoldedBeforeTheAnswer(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	show := &showThinking{}
	r.start(pusher.Config{Heartbeat: time.Hour, Thinking: show})
	const tools = "🔧 search: started\n🔧 search: done\n"
	thinking := "Let me look.\n" + tools
	for _, c := range []struct {
		mode, user, progress, final string
	}{
		{"true", "alice", "<think>Let me look.\n🔧 search: started\n🔧 search: done</think>",
			"<think>Let me look.\n🔧 search: started\n🔧 search: done</think>\n\nHello."},
		{"tools", "bob", "<think>🔧 search: started\n🔧 search: done</think>", "<think>🔧 search: started\n🔧 search: done</think>\n\nHello."},
		{"false", "carol", "", "Hello."},
	} {
		show.v.Store(c.mode)
		rec := r.ask(c.user, "q")
		asked := time.Now()
		before := r.stats().Frames[wecom.CmdRespondMsg]
		for i := range 20 { // versions over 1.5 s, the thinking growing, as a worker writes them
			r.writeThinking(rec.ID, "", thinking[:len(thinking)*(i+1)/20], tools[:len(tools)*(i+1)/20], false)
			time.Sleep(75 * time.Millisecond)
		}
		if c.progress != "" {
			testwait.Eventually(t, waitLong, c.mode+": the thinking shown", func() bool {
				bot := r.botMessages(c.user)
				return len(bot) == 1 && bot[0].Content == c.progress && !bot[0].Finished
			})
			// Paced as text is: at most a frame a gap since the receipt.
			gap := pusher.ProgressGap(20)
			if n, most := r.stats().Frames[wecom.CmdRespondMsg]-before, int64(time.Since(asked)/gap)+1; n > most {
				t.Errorf("%s: %d frames for the thinking in %s, at most %d at the pace", c.mode, n, time.Since(asked), most)
			}
		}
		r.writeThinking(rec.ID, "Hello.", thinking, tools, true)
		r.waitDelivery(rec.ID, task.Delivered)
		if bot := r.botMessages(c.user); len(bot) != 1 || bot[0].Content != c.final || !bot[0].Finished {
			t.Errorf("%s: the user sees %+v, want %q finished", c.mode, bot, c.final)
		}
	}
}

// The final frame shows the thinking only as far as the answer's first
// part leaves room: an answer of two parts is delivered whole, its parts
// as without thinking.
func TestThinkingNeverCostsTheAnswerItsRoom(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	show := &showThinking{}
	show.v.Store("true")
	r.start(pusher.Config{Heartbeat: time.Hour, Thinking: show})
	rec := r.ask("alice", "q")
	var b strings.Builder
	for i := 0; b.Len() < 30000; i++ {
		fmt.Fprintf(&b, "Line %d of a long answer.\n", i)
	}
	answer := strings.TrimSpace(b.String())
	r.writeThinking(rec.ID, answer, strings.Repeat("think ", 2000), "", true)
	r.waitDelivery(rec.ID, task.Delivered)
	got := ""
	for _, m := range r.botMessages("alice") {
		got += m.Content
	}
	if strings.Contains(got, "<think>") {
		t.Errorf("a frame full of the answer carried thinking")
	}
	parts := pusher.Parts(answer, wecom.MaxContentBytes)
	if len(parts) < 2 || !strings.HasPrefix(got, parts[0]) {
		t.Errorf("%d parts; the user's first message is not the first part", len(parts))
	}
}
