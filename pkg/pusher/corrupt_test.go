package pusher_test

import (
	"context"
	"sync"
	"testing"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// skips is a task.Corruption that counts the skips of each task by where.
type skips struct {
	mu sync.Mutex
	n  map[[2]string]int // {task id, where} → skips
}

func (s *skips) CorruptRecord(_, id, where string, _ error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[[2]string]int{}
	}
	s.n[[2]string{id, where}]++
}

func (s *skips) of(id, where string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[[2]string{id, where}]
}

// putCorrupt puts a value that is no record under task id, as a disk or
// a hand might, and names it in the bot's undelivered index.
func (r *rig) putCorrupt(id string) {
	r.t.Helper()
	ctx := context.Background()
	if _, err := r.js.Store.Tasks().Put(ctx, id, []byte(`{"id": "`+id+`", "bot": "b", not json`)); err != nil {
		r.t.Fatal(err)
	}
	if err := r.js.Store.MarkUndelivered(ctx, "b", id); err != nil {
		r.t.Fatal(err)
	}
}

// A task record that does not decode, in the undelivered index at the
// term's start: the rebuild skips it (before, it retried for ever and the
// pusher never began, so none of the bot's answers went out), the other
// tasks are delivered, and every skip is reported. Announced again later,
// a step skips it and drops it from the active set.
func TestCorruptRecordIsSkippedAndTheRestDelivered(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	bad := task.ID("b", "lost")
	r.putCorrupt(bad)
	waiting := r.ask("bob", "asked before the term") // not announced: found by the rebuild
	heard := &skips{}
	r.lc = r.lc.WithCorruption(heard)
	r.start(pusher.Config{Lifecycle: r.lc})
	r.write(waiting.ID, "Hello, bob.", true)
	r.waitDelivery(waiting.ID, task.Delivered)
	rec := r.ask("alice", "asked during the term")
	r.write(rec.ID, "Hello, alice.", true)
	r.waitDelivery(rec.ID, task.Delivered)
	if n := heard.of(bad, task.CorruptAtRebuild); n != 1 {
		t.Fatalf("the rebuild reported the corrupt record %d times, want 1", n)
	}

	r.p.Notify(bad) // as the resync does, once a minute
	testwait.Eventually(t, waitLong, "the step skips the corrupt record", func() bool { return heard.of(bad, task.CorruptAtPush) == 1 })
	// Out of the active set: not stepped (and read) again every second.
	testwait.Eventually(t, waitLong, "the corrupt record out of the active set", func() bool { return r.p.Stats().Active == 0 })
}
