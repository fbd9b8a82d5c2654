package pusher_test

import (
	"context"
	"strings"
	"testing"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
)

const handoverNote = "（服务切换中，完整回答稍后单独发送）"

// A graceful handover: the stopping leader closes each stream it began,
// a running answer's with the content so far and the note, a queued one's
// with the note; the next leader pushes each complete answer once.
func TestHandoverClosesOpenStreamsAndTheAnswerFollowsOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{})
	running := r.ask("alice", "hi")
	queued := r.ask("bob", "later")
	r.write(running.ID, "half of it", false)
	// carol's answer is complete in the output bucket, its record not
	// written yet (a worker between its last write and Finish).
	written := r.ask("carol", "quick")
	r.write(written.ID, "whole", false)
	out := r.lc.Output(written.ID, "b", r.runs[written.ID])
	if err := out.Final(context.Background(), "the whole answer."); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitLong, "the progress frame", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content == "half of it"
	})
	r.stop() // the term's work ends; the connection and the term are still this node's
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if closed := r.p.Handover(ctx); closed != 2 {
		t.Fatalf("Handover closed %d streams, want 2 (not carol's, whose answer is written)", closed)
	}
	if bot := r.botMessages("carol"); len(bot) == 0 || bot[len(bot)-1].Finished {
		t.Fatalf("carol's stream, whose complete answer is written but not recorded, was closed: %+v (the push would show the answer twice)", bot)
	}
	for user, want := range map[string]string{"alice": "half of it\n\n" + handoverNote, "bob": handoverNote} {
		bot := r.botMessages(user)
		if len(bot) != 1 || bot[0].Kind != "stream" || !bot[0].Finished || bot[0].Content != want {
			t.Fatalf("%s's stream after the handover: %+v, want one finished stream %q", user, bot, want)
		}
	}
	for _, id := range []string{running.ID, queued.ID} {
		if d := r.record(id).Delivery; d != task.Truncated {
			t.Fatalf("task %s's delivery after the handover: %s, want truncated (owed by push)", id, d)
		}
	}

	r.connect(2) // the next leader
	r.write(running.ID, "half of it, and the rest.", true)
	r.write(queued.ID, "the later answer", true)
	if _, err := r.lc.Finish(context.Background(), written.ID, r.runs[written.ID], "the whole answer."); err != nil {
		t.Fatal(err)
	}
	r.start(pusher.Config{})
	r.waitDelivery(running.ID, task.Delivered)
	r.waitDelivery(queued.ID, task.Delivered)
	r.waitDelivery(written.ID, task.Delivered)
	for user, answer := range map[string]string{"alice": "and the rest.", "bob": "the later answer", "carol": "the whole answer."} {
		n := 0
		for _, m := range r.botMessages(user) {
			if strings.Contains(m.Content, answer) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%s's complete answer reached the user %d times: %+v", user, n, r.botMessages(user))
		}
	}
}
