package jetstream

import (
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// A NATS server that is not clustered forgets a memory stream when it
// restarts: the progress bucket is declared again by the first call that
// finds it gone, so the text of answers in progress is written and
// watched again without a node restart. The other buckets are on disk
// and keep their values.
func TestProgressBucketComesBackAfterAServerRestart(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st, err := Declare(ctx, js, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Progress().Create(ctx, "t1", []byte("so far")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Output().Create(ctx, "t0", []byte("answer")); err != nil {
		t.Fatal(err)
	}
	srv.stop()
	srv.start()
	// Wait for the client's reconnect and the server's JetStream: the
	// output bucket answers again.
	testwait.Eventually(t, 30*time.Second, "the output bucket answers", func() bool {
		e, err := st.Output().Get(ctx, "t0")
		return err == nil && string(e.Value()) == "answer"
	})
	if _, err := js.Stream(ctx, "KV_"+st.Names().ProgressBucket); err == nil {
		t.Skip("this nats-server kept a memory stream across a restart: nothing to declare again")
	}
	// The entry is lost with the stream (memory), and the read says so
	// as a key not found, not as an error.
	if _, err := st.Progress().Get(ctx, "t1"); err != natsjs.ErrKeyNotFound {
		t.Fatalf("read of the lost entry: %v, want key not found", err)
	}
	if _, err := st.Progress().Create(ctx, "t1", []byte("so far, and more")); err != nil {
		t.Fatalf("write after the restart: %v", err)
	}
	w, err := st.Progress().WatchAll(ctx, natsjs.UpdatesOnly())
	if err != nil {
		t.Fatalf("watch after the restart: %v", err)
	}
	defer w.Stop()
	if _, err := st.Progress().Put(ctx, "t2", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-w.Updates():
		if e == nil || e.Key() != "t2" {
			t.Fatalf("watch delivered %v", e)
		}
	case <-ctx.Done():
		t.Fatal("the watch delivered nothing")
	}
	info, err := js.Stream(ctx, "KV_"+st.Names().ProgressBucket)
	if err != nil || info.CachedInfo().Config.Storage != natsjs.MemoryStorage {
		t.Fatalf("declared again: %v", err)
	}
}
