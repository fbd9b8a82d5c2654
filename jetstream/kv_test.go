package jetstream

import (
	natsjs "github.com/nats-io/nats.go/jetstream"
	"strconv"
	"testing"
	"time"
)

// nextUpdate waits for the watcher's next update, nil being "caught up".
func nextUpdate(t *testing.T, w natsjs.KeyWatcher) natsjs.KeyValueEntry {
	t.Helper()
	select {
	case e, ok := <-w.Updates():
		if !ok {
			t.Fatal("watcher closed")
		}
		return e
	case <-time.After(20 * time.Second):
		t.Fatal("no watch update within 20s")
		return nil
	}
}

// The pusher's watermark: a watch resumed from a stored revision delivers
// every key changed at or after it (latest value each, history 1), then a
// nil entry meaning "caught up", then live updates.
func TestWatchResumesFromRevision(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{})
	out := st.Output()

	revA, err := out.Put(ctx, TaskKey("a"), []byte("a1"))
	if err != nil {
		t.Fatal(err)
	}
	revB, err := out.Put(ctx, TaskKey("b"), []byte("b1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := out.Put(ctx, TaskKey("c"), []byte("c1")); err != nil {
		t.Fatal(err)
	}
	if _, err := out.Put(ctx, TaskKey("b"), []byte("b2")); err != nil { // replaces b1
		t.Fatal(err)
	}
	// The pusher handled everything up to a; it stored the next revision.
	wm := revA + 1
	if _, err := st.Watermarks().Put(ctx, BotKey("bot"), []byte(strconv.FormatUint(wm, 10))); err != nil {
		t.Fatal(err)
	}
	if revB != wm {
		t.Fatalf("revisions: a=%d b=%d", revA, revB)
	}

	w, err := out.WatchAll(ctx, natsjs.ResumeFromRevision(wm))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	for {
		e := nextUpdate(t, w)
		if e == nil {
			break // caught up
		}
		if e.Revision() < wm {
			t.Fatalf("resumed watch delivered revision %d below the watermark %d", e.Revision(), wm)
		}
		got = append(got, e.Key()+"="+string(e.Value()))
	}
	want := []string{"c=c1", "b=b2"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("resumed watch delivered %v, want %v (b1 was replaced: history 1)", got, want)
	}

	// Live from here.
	rev, err := out.Put(ctx, TaskKey("d"), []byte("d1"))
	if err != nil {
		t.Fatal(err)
	}
	e := nextUpdate(t, w)
	if e == nil || e.Key() != "d" || e.Revision() != rev {
		t.Fatalf("live update = %v, want d at revision %d", e, rev)
	}

	// Resuming past the end: caught up at once.
	w2, err := out.WatchAll(ctx, natsjs.ResumeFromRevision(rev+1))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	if e := nextUpdate(t, w2); e != nil {
		t.Fatalf("watch resumed past the end delivered %s, want nil (caught up)", e.Key())
	}
}

// A record can be updated only from the revision it was read at: two
// writers of one task record cannot both win.
func TestTaskRecordRevisions(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{})
	rev, err := st.Tasks().Create(ctx, TaskKey("t1"), []byte("queued"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Tasks().Create(ctx, TaskKey("t1"), []byte("queued")); !errorsIs(err, natsjs.ErrKeyExists) {
		t.Fatalf("second Create: %v, want ErrKeyExists", err)
	}
	if _, err := st.Tasks().Update(ctx, TaskKey("t1"), []byte("running"), rev); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Tasks().Update(ctx, TaskKey("t1"), []byte("running elsewhere"), rev); !errorsIs(err, natsjs.ErrKeyRevisionMismatch) && !errorsIs(err, natsjs.ErrKeyExists) {
		t.Fatalf("stale Update: %v, want a revision mismatch", err)
	}
}

// Context keys of unsafe ids are valid KV keys and group per bot.
func TestContextKeys(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{ContextHistory: 3})
	for _, conv := range []string{"alice", "wr.group chat>1", "*", ""} {
		if _, err := st.Context().Put(ctx, ConversationKey("bot.1", conv), []byte(conv)); err != nil {
			t.Fatalf("put context of %q: %v", conv, err)
		}
	}
	lister, err := st.Context().ListKeysFiltered(ctx, EncodeToken("bot.1")+".>")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range lister.Keys() {
		n++
	}
	if n != 4 {
		t.Fatalf("listed %d context keys of bot.1, want 4", n)
	}
}
