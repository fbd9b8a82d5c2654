package dispatch

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

// A spooled task past spool.expiry is not queued: it is recorded failed
// with the reason, its conversation marked "may be incomplete" for this
// answer (the pusher then tells the user it was not answered, and to send
// it again); one forwarded late is queued marked late, in its record and
// its queued message, so that its answer starts with the late note.
func TestSpoolOutExpiredAndLate(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	ctx := context.Background()
	lc := task.NewLifecycle(env.Store, "leader", zerolog.Nop())
	out := NewSpoolOut(env.Store, lc, zerolog.Nop(), nil)
	entry := func(msgid, chat string, waited time.Duration) (jetstream.SpoolEntry, task.Message) {
		m := task.Message{TaskID: task.ID("b", msgid), Bot: "b", MsgID: msgid, Chat: chat, Question: "q", Received: time.Now().Add(-waited)}
		raw, _ := json.Marshal(m)
		return jetstream.SpoolEntry{Bot: "b", Conversation: chat, MsgID: msgid, Payload: raw, Received: m.Received, Spooled: m.Received}, m
	}
	queued := func(chat string) *task.Message {
		msg, err := env.Store.ConversationTask(ctx, "b", chat)
		if err != nil {
			t.Fatal(err)
		}
		if msg == nil {
			return nil
		}
		var m task.Message
		json.Unmarshal(msg.Data, &m)
		return &m
	}

	old, om := entry("m1", "alice", 2*time.Hour)
	if err := out.Expired(time.Hour).Publish(ctx, old); err != nil {
		t.Fatal(err)
	}
	r, err := lc.Get(ctx, om.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Exec != task.Failed || r.Busy || r.Attempt != 0 || !strings.Contains(r.Error, "spool.expiry") || r.Incomplete == "" || r.Chat != "alice" {
		t.Fatalf("expired task's record = exec %s busy %v attempt %d error %q incomplete %q", r.Exec, r.Busy, r.Attempt, r.Error, r.Incomplete)
	}
	if q := queued("alice"); q != nil {
		t.Fatalf("expired task queued: %+v", q)
	}

	late, lm := entry("m2", "bob", 10*time.Minute)
	late.Late = true
	if _, err := lc.Open(ctx, task.RecordOf(lm)); err != nil { // the inbound path recorded it, not late
		t.Fatal(err)
	}
	for range 2 { // again after a crash: the record is late already, the queue says duplicate
		if err := out.Publish(ctx, late); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := lc.Get(ctx, lm.TaskID); err != nil || !r.Late || r.Exec != task.Queued {
		t.Fatalf("late task's record = %+v (%v), want queued and late", r, err)
	}
	if q := queued("bob"); q == nil || q.TaskID != lm.TaskID || !q.Late {
		t.Fatalf("late task queued as %+v, want marked late", q)
	}

	fresh, fm := entry("m3", "carol", 0)
	if err := out.Publish(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if q := queued("carol"); q == nil || q.TaskID != fm.TaskID || q.Late {
		t.Fatalf("fresh task queued as %+v, want not late", q)
	}
}
