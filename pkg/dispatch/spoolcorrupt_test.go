package dispatch

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

// skipsHeard is a task.Corruption that keeps the tasks skipped, by where.
type skipsHeard struct {
	mu sync.Mutex
	n  map[[2]string]int
}

func (s *skipsHeard) CorruptRecord(_, id, where string, _ error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[[2]string]int{}
	}
	s.n[[2]string{id, where}]++
}

func (s *skipsHeard) of(id, where string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[[2]string{id, where}]
}

// A spooled task whose record (written by a fallback tier while the queue
// was away) does not decode: the spool's way out drops it and reports it,
// and the tasks spooled after it are forwarded. Before, it was kept for a
// later try, for ever: the spool drains in order, so nothing after it was
// ever queued.
func TestSpoolForwardsPastACorruptRecord(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	ctx := context.Background()
	heard := &skipsHeard{}
	lc := task.NewLifecycle(env.Store, "leader", zerolog.Nop()).WithCorruption(heard)
	out := NewSpoolOut(env.Store, lc, zerolog.Nop(), nil)
	spool, err := jetstream.OpenSpool(filepath.Join(t.TempDir(), "spool.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer spool.Close()
	ids := map[string]string{}
	for _, e := range []struct{ msgid, chat string }{{"m1", "alice"}, {"m2", "bob"}} {
		m := task.Message{TaskID: task.ID("b", e.msgid), Bot: "b", MsgID: e.msgid, Chat: e.chat, Question: "q", Received: time.Now()}
		raw, _ := json.Marshal(m)
		if err := spool.Append(jetstream.SpoolEntry{Bot: "b", Conversation: e.chat, MsgID: e.msgid, Payload: raw, Received: m.Received}); err != nil {
			t.Fatal(err)
		}
		ids[e.chat] = m.TaskID
	}
	if _, err := env.Store.Tasks().Put(ctx, ids["alice"], []byte("{not json")); err != nil {
		t.Fatal(err)
	}

	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := spool.Drain(dctx, out.Publish)
	if err != nil || n != 2 {
		t.Fatalf("drain: %d forwarded, %v (want both entries gone)", n, err)
	}
	if left, _ := spool.Len(); left != 0 {
		t.Fatalf("%d entries left in the spool", left)
	}
	queued := func(chat string) string {
		msg, err := env.Store.ConversationTask(ctx, "b", chat)
		if err != nil || msg == nil {
			return ""
		}
		var m task.Message
		json.Unmarshal(msg.Data, &m)
		return m.TaskID
	}
	if got := queued("bob"); got != ids["bob"] {
		t.Fatalf("bob's queue holds %q, want the task spooled after the corrupt one", got)
	}
	if got := queued("alice"); got != "" {
		t.Fatalf("alice's queue holds %q: a task no worker can start would hold her conversation", got)
	}
	if n := heard.of(ids["alice"], task.CorruptAtSpool); n != 1 {
		t.Fatalf("the corrupt record reported %d times, want 1", n)
	}
	if r, err := lc.Get(ctx, ids["alice"]); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("the corrupt value was changed: %+v %v", r, err)
	}
}
