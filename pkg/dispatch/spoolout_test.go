package dispatch

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

// What the spool's way out does with a task a fallback tier took while
// the queue was away: one still running is queued, as the copy that holds
// its conversation until it ends (before, it was dropped, and the
// conversation took a second question beside the running answer); one
// that ended is not queued; one never started is queued to run.
func TestSpoolOutQueuesTheCopyOfATaskStillRunningOffQueue(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	ctx := context.Background()
	lc := task.NewLifecycle(env.Store, "leader", zerolog.Nop())
	out := NewSpoolOut(env.Store, lc, zerolog.Nop(), nil)
	entry := func(msgid, chat string) (jetstream.SpoolEntry, task.Message) {
		m := task.Message{TaskID: task.ID("b", msgid), Bot: "b", MsgID: msgid, Chat: chat, Question: "q", Received: time.Now()}
		raw, _ := json.Marshal(m)
		return jetstream.SpoolEntry{Bot: "b", Conversation: chat, MsgID: msgid, Payload: raw, Received: m.Received}, m
	}
	queued := func(chat string) string {
		msg, err := env.Store.ConversationTask(ctx, "b", chat)
		if err != nil {
			t.Fatal(err)
		}
		if msg == nil {
			return ""
		}
		var m task.Message
		json.Unmarshal(msg.Data, &m)
		return m.TaskID
	}

	running, rm := entry("m1", "alice")
	if _, _, err := lc.Start(ctx, rm, "local", 0); err != nil {
		t.Fatal(err)
	}
	ended, em := entry("m2", "bob")
	attempt, _, err := lc.Start(ctx, em, "local", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := lc.Output(em.TaskID, "b", attempt).Write(ctx, "answer"); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Finish(ctx, em.TaskID, attempt, "answer"); err != nil {
		t.Fatal(err)
	}
	fresh, fm := entry("m3", "carol")

	for _, e := range []jetstream.SpoolEntry{running, ended, fresh} {
		if err := out.Publish(ctx, e); err != nil {
			t.Fatalf("publish %s: %v", e.MsgID, err)
		}
	}
	if got := queued("alice"); got != rm.TaskID {
		t.Fatalf("alice's queue holds %q, want the copy of the task running off the queue", got)
	}
	if got := queued("bob"); got != "" {
		t.Fatalf("bob's queue holds %q, want nothing: the task ended off the queue", got)
	}
	if got := queued("carol"); got != fm.TaskID {
		t.Fatalf("carol's queue holds %q, want the spooled task", got)
	}
	// The running task is untouched: still attempt 1, running.
	if r, err := lc.Get(ctx, rm.TaskID); err != nil || r.Exec != task.Running || r.Attempt != 1 {
		t.Fatalf("running task after the forward: %+v (%v)", r, err)
	}
}
