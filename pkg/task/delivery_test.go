package task_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
)

// ShownFrom writes on top of the record the caller read when nobody wrote
// it since, and starts over from a fresh read when somebody did: the other
// writer's change survives, and the caller's copy is never changed.
func TestShownFrom(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	m := f.queue("m1", "u1")
	at := time.Now()

	r, rev, err := task.Get(f.ctx, f.env.Store.Tasks(), m.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	got, next, err := f.lc.ShownFrom(f.ctx, r, rev, task.Frame{Hash: "h1", At: at})
	if err != nil {
		t.Fatal(err)
	}
	if _, stored, err := task.Get(f.ctx, f.env.Store.Tasks(), m.TaskID); err != nil || stored != next || next == rev {
		t.Fatalf("ShownFrom returned revision %d; stored %d (%v), read at %d", next, stored, err, rev)
	}
	if got.PushedHash != "h1" || got.Delivery != task.Streaming || r.PushedHash != "" || r.Delivery != task.Pending {
		t.Fatalf("after ShownFrom: got %q %s, the caller's copy %q %s", got.PushedHash, got.Delivery, r.PushedHash, r.Delivery)
	}
	if stored := f.record(m.TaskID); stored.PushedHash != "h1" || len(stored.RecentSends) != 1 {
		t.Fatalf("stored: pushed %q, recent sends %d", stored.PushedHash, len(stored.RecentSends))
	}

	// A stale revision: the worker wrote meanwhile (here: the pusher's own
	// first write); the frame is recorded on top of it, nothing is lost.
	if _, _, err := f.lc.ShownFrom(f.ctx, r, rev, task.Frame{Hash: "h2", At: at.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	stored := f.record(m.TaskID)
	if stored.PushedHash != "h2" || len(stored.RecentSends) != 2 || stored.Delivery != task.Streaming {
		t.Fatalf("after a stale ShownFrom: pushed %q, recent sends %d, delivery %s", stored.PushedHash, len(stored.RecentSends), stored.Delivery)
	}
	if _, _, err := f.lc.ShownFrom(f.ctx, nil, 0, task.Frame{Hash: "h3", At: at}); err == nil {
		t.Fatal("ShownFrom with no record read: no error")
	}
}

// Frames kept unwritten (WithShown) go with the next write, even one that
// starts from a stale revision and reads afresh; a frame the record has
// already is not counted twice; with nothing new, nothing is written.
func TestShownFramesKeptUnwrittenGoWithTheNextWrite(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	m := f.queue("m1", "u1")
	at := time.Now()
	r, rev, err := task.Get(f.ctx, f.env.Store.Tasks(), m.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	first := task.Frame{Hash: "h1", At: at}
	r, rev, err = f.lc.ShownFrom(f.ctx, r, rev, first)
	if err != nil {
		t.Fatal(err)
	}
	kept := []task.Frame{{Hash: "h2", At: at.Add(time.Second)}, {Hash: "", At: at.Add(2 * time.Second)}}
	mem := f.lc.WithShown(r, kept...)
	if mem.PushedHash != "h2" || len(mem.RecentSends) != 3 || !mem.PushedAt.Equal(kept[1].At) || r.PushedHash != "h1" {
		t.Fatalf("WithShown: pushed %q at %s, %d recent sends; the caller's copy %q", mem.PushedHash, mem.PushedAt, len(mem.RecentSends), r.PushedHash)
	}
	if stored := f.record(m.TaskID); stored.PushedHash != "h1" {
		t.Fatalf("WithShown wrote: stored %q", stored.PushedHash)
	}
	// Somebody writes meanwhile: the next write reads afresh and applies
	// every frame the stored record lacks, once each.
	e, err := f.env.Store.Tasks().Get(f.ctx, m.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.env.Store.Tasks().Put(f.ctx, m.TaskID, e.Value()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.lc.ShownFrom(f.ctx, mem, rev, append([]task.Frame{first}, append(kept, task.Frame{Hash: "h4", At: at.Add(3 * time.Second)})...)...); err != nil {
		t.Fatal(err)
	}
	stored, rev2, err := task.Get(f.ctx, f.env.Store.Tasks(), m.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.PushedHash != "h4" || len(stored.RecentSends) != 4 || !stored.PushedAt.Equal(at.Add(3*time.Second)) {
		t.Fatalf("after the write: pushed %q at %s, %d recent sends (want h4, 4: h1, h2, the status line, h4)", stored.PushedHash, stored.PushedAt, len(stored.RecentSends))
	}
	if _, rev3, err := f.lc.ShownFrom(f.ctx, stored, rev2, kept...); err != nil || rev3 != rev2 {
		t.Fatalf("frames the record has: revision %d → %d (%v), want no write", rev2, rev3, err)
	}
}

// The final frame's intent and its delivery, chained from the pusher's
// read: the revision FinalIntentFrom returns is the record's after its
// write (DeliveredFrom needs no read), and a stale revision (someone wrote
// meanwhile) is read again, not lost.
func TestFinalIntentFromThenDeliveredFrom(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	m := f.queue("m1", "u1")
	r, rev, err := task.Get(f.ctx, f.env.Store.Tasks(), m.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	ir, irev, err := f.lc.FinalIntentFrom(f.ctx, r, rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, now, _ := task.Get(f.ctx, f.env.Store.Tasks(), m.TaskID); !ir.FinalPending || r.FinalPending || irev != now || irev <= rev {
		t.Fatalf("after FinalIntentFrom: pending %v (caller's copy %v), revision %d, stored %d, read at %d", ir.FinalPending, r.FinalPending, irev, now, rev)
	}
	// Again from the same (now stale) read: nothing changes, no error.
	if again, arev, err := f.lc.FinalIntentFrom(f.ctx, r, rev); err != nil || !again.FinalPending || arev != irev {
		t.Fatalf("stale FinalIntentFrom: %+v rev %d (want %d) %v", again, arev, irev, err)
	}
	got, err := f.lc.DeliveredFrom(f.ctx, ir, irev, "the answer", "final frame acked", 0)
	if err != nil {
		t.Fatal(err)
	}
	stored := f.record(m.TaskID)
	if got.Delivery != task.Delivered || stored.Delivery != task.Delivered || stored.FinalPending || stored.PushedHash != task.Hash("the answer") {
		t.Fatalf("after DeliveredFrom: delivery %s, stored %s, final pending %v", got.Delivery, stored.Delivery, stored.FinalPending)
	}
	if ids, err := f.env.Store.UndeliveredTasks(f.ctx, "b"); err != nil || slices.Contains(ids, m.TaskID) {
		t.Fatalf("still in the undelivered index: %v %v", ids, err)
	}
}

// The count of pushed parts only grows within one push, and a count or a
// delivery written for an earlier push (from before a redeliver or a
// retry: a step still in flight, a deposed leader's) changes nothing: no
// part is pushed twice for a count that went back, none skipped for a
// count that came late.
func TestPartPushedIsMonotonicPerPush(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	r := task.New("b", "m1", time.Now())
	r.Chat, r.ChatType = "alice", "single"
	if _, err := f.lc.Open(f.ctx, r); err != nil {
		t.Fatal(err)
	}
	a, _, err := f.lc.Start(f.ctx, task.MessageOf(r), "local", 0)
	if err != nil {
		t.Fatal(err)
	}
	f.lc.Output(r.ID, "b", a).Write(f.ctx, "answer")
	if _, err := f.lc.Finish(f.ctx, r.ID, a, "answer"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.lc.Truncate(f.ctx, r.ID, "answer larger than one frame"); err != nil {
		t.Fatal(err)
	}
	from := f.record(r.ID)
	for _, n := range []int{1, 3, 2} { // the count of part 2 lands last
		if _, err := f.lc.PartPushed(f.ctx, from, n); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.record(r.ID).PushedParts; got != 3 {
		t.Fatalf("pushed_parts = %d after counts 1, 3, 2: went back", got)
	}

	if _, err := f.lc.Redeliver(f.ctx, r.ID, "operator"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.lc.PartPushed(f.ctx, from, 4); !errors.Is(err, task.ErrPushSuperseded) {
		t.Fatalf("a count from before the redeliver: %v, want ErrPushSuperseded", err)
	}
	if _, err := f.lc.Delivered(f.ctx, from, "answer", "4 part(s) pushed", 4); !errors.Is(err, task.ErrPushSuperseded) {
		t.Fatalf("a delivery from before the redeliver: %v, want ErrPushSuperseded", err)
	}
	if got := f.record(r.ID); got.PushedParts != 0 || got.Delivery != task.Pending {
		t.Fatalf("after stale writes: pushed_parts %d, delivery %s; the redelivery would skip parts", got.PushedParts, got.Delivery)
	}

	again := f.record(r.ID)
	if _, err := f.lc.PartPushed(f.ctx, again, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.lc.Retry(f.ctx, r.ID, "operator"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.lc.PartPushed(f.ctx, again, 2); !errors.Is(err, task.ErrPushSuperseded) {
		t.Fatalf("a count from before the retry: %v, want ErrPushSuperseded", err)
	}
	if got := f.record(r.ID).PushedParts; got != 0 {
		t.Fatalf("pushed_parts = %d after a stale count; the new answer would skip parts", got)
	}
}
