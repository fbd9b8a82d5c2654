package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/schema"
	bolt "go.etcd.io/bbolt"
)

func openSpool(t *testing.T, path string) *Spool {
	t.Helper()
	sp, err := OpenSpool(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	return sp
}

func spoolLen(t *testing.T, sp *Spool) int {
	t.Helper()
	n, err := sp.Len()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func entry(i int) SpoolEntry {
	return SpoolEntry{Bot: "bot", Conversation: fmt.Sprintf("user%03d", i), MsgID: fmt.Sprintf("m%03d", i),
		Payload: []byte(fmt.Sprintf("task %d", i)), Received: time.Unix(1700000000+int64(i), 0).UTC()}
}

func TestSpoolOrderAndDurability(t *testing.T) {
	leakCheck(t)
	path := filepath.Join(t.TempDir(), "spool.db")
	sp, err := OpenSpool(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := sp.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sp.Append(SpoolEntry{Bot: "bot", Conversation: "c"}); err == nil {
		t.Fatal("Append without msgid succeeded")
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopened, everything is there, in order.
	sp = openSpool(t, path)
	if n := spoolLen(t, sp); n != 5 {
		t.Fatalf("Len after reopen = %d, want 5", n)
	}
	// A drain that fails on the third entry forwards two and keeps three.
	var got []SpoolEntry
	errDown := errors.New("down")
	n, err := sp.Drain(context.Background(), func(_ context.Context, e SpoolEntry) error {
		if len(got) == 2 {
			return errDown
		}
		got = append(got, e)
		return nil
	})
	if n != 2 || !errors.Is(err, errDown) {
		t.Fatalf("Drain = %d, %v; want 2 and the publish error", n, err)
	}
	if n := spoolLen(t, sp); n != 3 {
		t.Fatalf("Len after a failed drain = %d, want 3", n)
	}
	n, err = sp.Drain(context.Background(), func(_ context.Context, e SpoolEntry) error {
		got = append(got, e)
		return nil
	})
	if n != 3 || err != nil {
		t.Fatalf("second Drain = %d, %v", n, err)
	}
	for i, e := range got {
		want := entry(i)
		if e.MsgID != want.MsgID || e.Conversation != want.Conversation || string(e.Payload) != string(want.Payload) || !e.Received.Equal(want.Received) {
			t.Fatalf("entry %d = %+v, want %+v", i, e, want)
		}
	}
	if n := spoolLen(t, sp); n != 0 {
		t.Fatalf("Len after drain = %d", n)
	}
	// Sequence numbers keep growing after a drain: order holds across drains.
	if err := sp.Append(entry(9)); err != nil {
		t.Fatal(err)
	}
}

func TestSpoolAppendDuringDrain(t *testing.T) {
	leakCheck(t)
	sp := openSpool(t, filepath.Join(t.TempDir(), "spool.db"))
	if err := sp.Append(entry(0)); err != nil {
		t.Fatal(err)
	}
	var got []string
	var wg sync.WaitGroup
	n, err := sp.Drain(context.Background(), func(_ context.Context, e SpoolEntry) error {
		got = append(got, e.MsgID)
		if len(got) < 4 { // appended while this entry is being forwarded
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				if err := sp.Append(entry(i)); err != nil {
					t.Error(err)
				}
			}(len(got))
			wg.Wait()
		}
		return nil
	})
	if err != nil || n != 4 {
		t.Fatalf("Drain = %d, %v; want 4", n, err)
	}
	if fmt.Sprint(got) != "[m000 m001 m002 m003]" {
		t.Fatalf("drained %v", got)
	}
}

func TestSpoolDrainStopsWithContext(t *testing.T) {
	leakCheck(t)
	sp := openSpool(t, filepath.Join(t.TempDir(), "spool.db"))
	for i := 0; i < 3; i++ {
		if err := sp.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	n, err := sp.Drain(ctx, func(ctx context.Context, e SpoolEntry) error {
		cancel()
		return ctx.Err() // a publish that saw the cancellation: not done
	})
	if n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Drain = %d, %v; want 0 and context.Canceled", n, err)
	}
	if n := spoolLen(t, sp); n != 3 {
		t.Fatalf("Len = %d, want 3: nothing was forwarded", n)
	}
}

func TestSpoolSetsAsideCorruptEntry(t *testing.T) {
	leakCheck(t)
	sp := openSpool(t, filepath.Join(t.TempDir(), "spool.db"))
	if err := sp.Append(entry(0)); err != nil {
		t.Fatal(err)
	}
	// Key 0 sorts before the first appended entry (sequence 1).
	if err := sp.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(spoolBucket).Put(seqKey(0), []byte("{not json")) }); err != nil {
		t.Fatal(err)
	}
	var got []string
	n, err := sp.Drain(context.Background(), func(_ context.Context, e SpoolEntry) error {
		got = append(got, e.MsgID)
		return nil
	})
	if err != nil || n != 1 || fmt.Sprint(got) != "[m000]" {
		t.Fatalf("Drain = %d, %v, %v; want the good entry forwarded past the bad one", n, err, got)
	}
	if err := sp.db.View(func(tx *bolt.Tx) error {
		if string(tx.Bucket(corruptBucket).Get(seqKey(0))) != "{not json" {
			return errors.New("corrupt entry not kept in the corrupt bucket")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestSpoolRefusesSecondOpener(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the lock timeout")
	}
	path := filepath.Join(t.TempDir(), "spool.db")
	openSpool(t, path)
	// bbolt's flock is per open file description, so a second open in
	// this process is refused like one from another process.
	if sp, err := OpenSpool(path); err == nil {
		sp.Close()
		t.Fatal("second OpenSpool of a spool in use succeeded")
	}
}

// Through SpoolPublisher, duplicates and busy conversations are final
// answers: the entries are reported and deleted, the drain goes on.
func TestSpoolPublisherOutcomes(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{})
	sp := openSpool(t, filepath.Join(t.TempDir(), "spool.db"))

	for _, e := range []SpoolEntry{
		{Bot: "bot", Conversation: "alice", MsgID: "m1"},
		{Bot: "bot", Conversation: "alice", MsgID: "m2"},                             // busy: m1 is queued
		{Bot: "bot", Conversation: "alice", MsgID: "m1"},                             // WeCom resent m1
		{Bot: "bot", Conversation: "bob", MsgID: "m3", Payload: make([]byte, 2<<20)}, // too large
		{Bot: "bot", Conversation: "carol", MsgID: "m4"},
	} {
		if err := sp.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	n, err := sp.Drain(ctx, st.SpoolPublisher(func(e SpoolEntry, res PublishResult, err error) {
		switch {
		case errors.Is(err, ErrConversationBusy):
			got = append(got, e.MsgID+":busy")
		case errors.Is(err, ErrTaskRejected):
			got = append(got, e.MsgID+":rejected")
		case err != nil:
			t.Errorf("reported %s with %v", e.MsgID, err)
		case res.Duplicate:
			got = append(got, e.MsgID+":duplicate")
		default:
			got = append(got, e.MsgID+":queued")
		}
	}))
	if err != nil || n != 5 {
		t.Fatalf("Drain = %d, %v; want 5", n, err)
	}
	if want := "[m1:queued m2:busy m1:duplicate m3:rejected m4:queued]"; fmt.Sprint(got) != want {
		t.Fatalf("outcomes %v, want %v", got, want)
	}

	// Unavailable is not an answer: the entry stays.
	if err := sp.Append(SpoolEntry{Bot: "bot", Conversation: "dave", MsgID: "m5"}); err != nil {
		t.Fatal(err)
	}
	srv.stop()
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = sp.Drain(dctx, st.SpoolPublisher(nil))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Drain with the server down = %v, want ErrUnavailable", err)
	}
	if n := spoolLen(t, sp); n != 1 {
		t.Fatalf("Len = %d, want 1: the entry must stay while JetStream is down", n)
	}
}

// A conversation with a spooled task is held (busy) until the task is
// forwarded, across a restart too; other conversations are not.
func TestSpoolHoldsConversation(t *testing.T) {
	leakCheck(t)
	path := filepath.Join(t.TempDir(), "spool.db")
	sp := openSpool(t, path)
	if err := sp.Append(entry(1)); err != nil {
		t.Fatal(err)
	}
	if !sp.Holds("bot", "user001") || sp.Holds("bot", "user002") || sp.Holds("other", "user001") {
		t.Fatal("Holds wrong after Append")
	}
	sp.Close()
	sp = openSpool(t, path)
	if !sp.Holds("bot", "user001") {
		t.Fatal("a reopened spool forgot the held conversation")
	}
	if _, err := sp.Drain(context.Background(), func(context.Context, SpoolEntry) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if sp.Holds("bot", "user001") {
		t.Fatal("still held after forwarding")
	}
}

// An entry a newer botctl wrote (a node rolled back onto its spool) is
// not forwarded, nor anything behind it: Drain names both versions and
// every entry stays, in order, for a node of that version.
func TestSpoolLeavesANewerEntry(t *testing.T) {
	leakCheck(t)
	sp := openSpool(t, filepath.Join(t.TempDir(), "spool.db"))
	for i := range 2 {
		if err := sp.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	own := []byte(`{"v":` + strconv.Itoa(schema.Version) + `,`)
	if err := sp.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(spoolBucket)
		v := b.Get(seqKey(1))
		if !bytes.HasPrefix(v, own) {
			return fmt.Errorf("entry not stamped: %.30s", v)
		}
		return b.Put(seqKey(1), append([]byte(`{"v":`+strconv.Itoa(schema.Version+1)+`,`), v[len(own):]...))
	}); err != nil {
		t.Fatal(err)
	}
	var got []string
	n, err := sp.Drain(context.Background(), func(_ context.Context, e SpoolEntry) error {
		got = append(got, e.MsgID)
		return nil
	})
	want := "spool entry has schema version " + strconv.Itoa(schema.Version+1) + ", this node knows up to " + strconv.Itoa(schema.Version)
	if n != 0 || len(got) != 0 || !errors.Is(err, schema.ErrNewer) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Drain = %d, %v, %v; want nothing forwarded and %q", n, got, err, want)
	}
	if l := spoolLen(t, sp); l != 2 {
		t.Fatalf("%d entries left, want 2", l)
	}
}
