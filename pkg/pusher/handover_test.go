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
	// carol's record is not written during this handover: it ends (its
	// ctx) once alice's and bob's streams are closed.
	r.p.OnHandoverPass(func(int) {
		if closedStream(r.botMessages("alice")) && closedStream(r.botMessages("bob")) {
			cancel()
		}
	})
	if closed := r.p.Handover(ctx, nil); closed != 2 {
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

// closedStream: the user's last bot message is a finished stream.
func closedStream(bot []wecomsim.TranscriptEntry) bool {
	return len(bot) > 0 && bot[len(bot)-1].Kind == "stream" && bot[len(bot)-1].Finished
}

// A complete answer whose record is written while the handover runs gets
// its final frame on its own stream, not the note: Handover takes a task
// that could not act yet again, within its ctx.
func TestHandoverFinishesAnAnswerRecordedMeanwhile(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{})
	running := r.ask("alice", "hi")
	r.write(running.ID, "half of it", false)
	written := r.ask("carol", "quick")
	r.write(written.ID, "whole", false)
	out := r.lc.Output(written.ID, "b", r.runs[written.ID])
	if err := out.Final(context.Background(), "the whole answer."); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitLong, "the progress frames", func() bool {
		return len(r.botMessages("alice")) == 1 && len(r.botMessages("carol")) == 1
	})
	r.stop()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	passes, pendingAfterFirst := 0, -1
	var finishErr error
	r.p.OnHandoverPass(func(pending int) {
		passes++
		if passes == 1 {
			pendingAfterFirst = pending
			// The worker records the answer it wrote.
			_, finishErr = r.lc.Finish(context.Background(), written.ID, r.runs[written.ID], "the whole answer.")
		}
	})
	closed := r.p.Handover(ctx, nil)
	if finishErr != nil {
		t.Fatal(finishErr)
	}
	if ctx.Err() != nil {
		t.Fatalf("Handover ran until its ctx ended (%d passes): carol's answer was not finished", passes)
	}
	if pendingAfterFirst != 1 || closed != 1 {
		t.Fatalf("first pass left %d tasks to take again (want 1: carol's), %d streams closed with the note (want 1: alice's)", pendingAfterFirst, closed)
	}
	bot := r.botMessages("carol")
	if last := bot[len(bot)-1]; !last.Finished || last.Content != "the whole answer." {
		t.Fatalf("carol's stream after the handover: %+v, want it finished with the whole answer and no note", bot)
	}
	if d := r.record(written.ID).Delivery; d != task.Delivered {
		t.Fatalf("carol's delivery after the handover: %s, want delivered", d)
	}
	if d := r.record(running.ID).Delivery; d != task.Truncated {
		t.Fatalf("alice's delivery after the handover: %s, want truncated (owed by push)", d)
	}
}

// A callback handled while the handover runs (its receipt began a stream
// on the connection being handed over) has its stream closed too: the
// handover ends only when the inbound path has no callback in hand.
func TestHandoverClosesAStreamBegunWhileItRuns(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{})
	r.stop()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	var late *task.Record
	inHand := true // a callback is being handled as the handover begins
	r.p.OnHandoverPass(func(int) {
		if late == nil {
			late = r.ask("dave", "late") // its receipt sent, its task announced
			inHand = false
		}
	})
	closed := r.p.Handover(ctx, func() bool { return inHand })
	if ctx.Err() != nil {
		t.Fatal("Handover ran until its ctx ended")
	}
	if closed != 1 {
		t.Fatalf("Handover closed %d streams, want 1 (dave's)", closed)
	}
	if bot := r.botMessages("dave"); !closedStream(bot) || bot[len(bot)-1].Content != handoverNote {
		t.Fatalf("dave's stream after the handover: %+v, want it finished with the note", bot)
	}
	if d := r.record(late.ID).Delivery; d != task.Truncated {
		t.Fatalf("dave's delivery after the handover: %s, want truncated (owed by push)", d)
	}
}
