package jetstream

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// The media store is bounded by MediaMaxBytes with DiscardNew: a file
// past the bound is refused as MediaFull and nothing of it is kept, while
// the task queue and the buckets, in the same JetStream storage, go on
// taking writes; deleting a file makes room again.
func TestMediaBoundRefusesFilesNotTasks(t *testing.T) {
	leakCheck(t)
	s := startServer(t)
	_, js := connect(t, s)
	const bound = 1 << 20
	st := declare(t, js, Options{MediaMaxBytes: bound})
	ctx := ctxT(t)

	info, err := js.Stream(ctx, "OBJ_BOTCTL_MEDIA")
	if err != nil {
		t.Fatal(err)
	}
	if c := info.CachedInfo().Config; c.MaxBytes != bound || c.Discard != natsjs.DiscardNew {
		t.Fatalf("media stream MaxBytes %d discard %v, want %d and DiscardNew", c.MaxBytes, c.Discard, bound)
	}
	if st.MediaMaxBytes() != bound {
		t.Fatalf("MediaMaxBytes() = %d", st.MediaMaxBytes())
	}

	file := bytes.Repeat([]byte{7}, 200<<10)
	var stored []string
	var refused error
	for i := 0; i < 20 && refused == nil; i++ {
		key := "t_fill/" + string(rune('a'+i))
		if _, err := st.Media().PutBytes(ctx, key, file); err != nil {
			refused = err
			// nats.go publishes an object's name beside its bytes: a
			// refused put may leave the name, which DeleteMedia removes.
			if err := st.DeleteMedia(ctx, key); err != nil {
				t.Fatalf("delete the refused file's name: %v", err)
			}
			if _, err := st.Media().GetInfo(ctx, key); err == nil {
				t.Fatalf("the refused file %s is listed", key)
			}
			break
		}
		stored = append(stored, key)
	}
	if refused == nil {
		t.Fatalf("20 files of 200 KiB stored under a bound of 1 MiB")
	}
	if !MediaFull(refused) {
		t.Fatalf("refusal %v: MediaFull false", refused)
	}
	used, err := st.MediaBytes(ctx)
	if err != nil || used > bound || used < bound/2 {
		t.Fatalf("MediaBytes = %d, %v; want at most the bound %d, and most of it", used, err, bound)
	}

	// The queue and the buckets are not affected by the full media store.
	if _, err := st.PublishTask(ctx, "b1", "c1", "m1", []byte("hello")); err != nil {
		t.Fatalf("a task while the media store is full: %v", err)
	}
	if _, err := st.Tasks().Put(ctx, "t_1", []byte(`{"id":"t_1"}`)); err != nil {
		t.Fatalf("a record while the media store is full: %v", err)
	}

	if err := st.DeleteMedia(ctx, stored[0], "never/stored"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Media().PutBytes(ctx, "t_after/0", file); err != nil {
		t.Fatalf("a file after one was deleted: %v", err)
	}
}

// DeleteMedia empties a store so full that not even the deletion marker
// of a name fits: the bytes are purged first, making room for it.
func TestDeleteMediaInAFullStore(t *testing.T) {
	leakCheck(t)
	s := startServer(t)
	_, js := connect(t, s)
	const bound = 256 << 10
	st := declare(t, js, Options{MediaMaxBytes: bound})
	ctx := ctxT(t)
	if _, err := st.Media().PutBytes(ctx, "t_x/0", bytes.Repeat([]byte{1}, 100<<10)); err != nil {
		t.Fatal(err)
	}
	// Fill the rest to 10 bytes short of the bound with one raw chunk
	// (nats-server's file store counts 30 bytes and the subject around a
	// message without headers).
	used, err := st.MediaBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	subj := mediaChunks("BOTCTL_MEDIA", "filler")
	if _, err := js.Publish(ctx, subj, make([]byte, bound-used-30-int64(len(subj))-10)); err != nil {
		t.Fatal(err)
	}
	if used, _ = st.MediaBytes(ctx); used != bound-10 {
		t.Fatalf("media store holds %d bytes, want %d", used, bound-10)
	}
	if err := st.DeleteMedia(ctx, "t_x/0"); err != nil {
		t.Fatalf("delete in a full store: %v", err)
	}
	if _, err := st.Media().GetInfo(ctx, "t_x/0"); err == nil {
		t.Fatal("the object is still listed")
	}
	if after, _ := st.MediaBytes(ctx); after >= used-100<<10 {
		t.Fatalf("media store holds %d bytes after the delete, was %d", after, used)
	}
}

// JetStream reserves the media store's bound on the server: a bound the
// server's storage cannot hold is refused at declaration, with the key
// to lower named.
func TestMediaBoundIsReserved(t *testing.T) {
	leakCheck(t)
	srv, err := natsserver.NewServer(&natsserver.Options{
		ServerName: "small", Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: t.TempDir(), JetStreamMaxStore: 64 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Each case starts from a deployment without a reservation or a media
	// store: the ones deployed are kept, whatever a later Declare asks.
	reset := func() {
		for _, name := range []string{"BOTCTL_RESERVE", "OBJ_BOTCTL_MEDIA"} {
			if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, natsjs.ErrStreamNotFound) {
				t.Fatal(err)
			}
		}
	}
	_, err = Declare(ctx, js, Options{MediaMaxBytes: 128 << 20, Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "media.max_store_bytes") {
		t.Fatalf("a media bound of 128 MiB on 64 MiB of storage: %v, want an error naming media.max_store_bytes", err)
	}
	// ReserveBytes keeps storage from the media bound for the others.
	reset()
	_, err = Declare(ctx, js, Options{MediaMaxBytes: 40 << 20, ReserveBytes: 32 << 20, Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "media.max_store_bytes") || !strings.Contains(err.Error(), "media.reserve_bytes") {
		t.Fatalf("a media bound of 40 MiB and 32 MiB reserved on 64 MiB of storage: %v, want an error naming both keys", err)
	}
	reset()
	_, err = Declare(ctx, js, Options{MediaMaxBytes: 40 << 20, ReserveBytes: 100 << 20, Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "media.reserve_bytes") {
		t.Fatalf("100 MiB reserved on 64 MiB of storage: %v, want an error naming media.reserve_bytes", err)
	}
	reset()
	if _, err := Declare(ctx, js, Options{MediaMaxBytes: 40 << 20, ReserveBytes: 16 << 20, Logger: testLogger(t)}); err != nil {
		t.Fatalf("a media bound of 40 MiB and 16 MiB reserved on 64 MiB of storage: %v", err)
	}
	st, err := js.Stream(ctx, "BOTCTL_RESERVE")
	if err != nil || st.CachedInfo().Config.MaxBytes != 16<<20 {
		t.Fatalf("reservation stream: %v", err)
	}

	// A store deployed without a bound, bounded at upgrade: a bound the
	// storage cannot hold fails the start the same way, and the store is
	// left as it was.
	reset()
	if _, err := js.CreateObjectStore(ctx, natsjs.ObjectStoreConfig{Bucket: "BOTCTL_MEDIA", Storage: natsjs.FileStorage}); err != nil {
		t.Fatal(err)
	}
	_, err = Declare(ctx, js, Options{MediaMaxBytes: 128 << 20, Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "media.max_store_bytes") {
		t.Fatalf("an unbounded media store bounded at 128 MiB on 64 MiB of storage: %v, want an error naming media.max_store_bytes", err)
	}
	if st, err := js.Stream(ctx, "OBJ_BOTCTL_MEDIA"); err != nil || st.CachedInfo().Config.MaxBytes != -1 {
		t.Fatalf("the unbounded store after the refused bound: %v", err)
	}
	if _, err := Declare(ctx, js, Options{MediaMaxBytes: 32 << 20, Logger: testLogger(t)}); err != nil {
		t.Fatalf("an unbounded media store bounded at 32 MiB on 64 MiB of storage: %v", err)
	}
}

// A tool that declares with its own options (a CLI command, its config
// silent on media) keeps the nodes' media TTL, bound and reservation:
// each difference is a mismatch naming its key, and the store reports
// the deployed bound.
func TestDeclareKeepsTheMediaBound(t *testing.T) {
	leakCheck(t)
	s := startServer(t)
	_, js := connect(t, s)
	declare(t, js, Options{MediaTTL: 2 * time.Hour, MediaMaxBytes: 8 << 20, ReserveBytes: 4 << 20})
	ctx := ctxT(t)
	tool := declare(t, js, Options{})
	media, err := js.Stream(ctx, "OBJ_BOTCTL_MEDIA")
	if err != nil {
		t.Fatal(err)
	}
	if c := media.CachedInfo().Config; c.MaxBytes != 8<<20 || c.MaxAge != 2*time.Hour || c.Discard != natsjs.DiscardNew {
		t.Fatalf("media stream after a tool's Declare: MaxBytes %d, MaxAge %s, discard %v", c.MaxBytes, c.MaxAge, c.Discard)
	}
	reserve, err := js.Stream(ctx, "BOTCTL_RESERVE")
	if err != nil || reserve.CachedInfo().Config.MaxBytes != 4<<20 {
		t.Fatalf("reservation after a tool's Declare with none: %v", err)
	}
	if o := tool.Options(); tool.MediaMaxBytes() != 8<<20 || o.MediaTTL != 2*time.Hour || o.ReserveBytes != 4<<20 {
		t.Fatalf("the tool's store: bound %d, TTL %s, reserve %d; want the deployed ones", tool.MediaMaxBytes(), o.MediaTTL, o.ReserveBytes)
	}
	found := map[string]Mismatch{}
	for _, m := range tool.Mismatches() {
		found[m.Stream+" "+m.Setting] = m
	}
	for want, key := range map[string]string{"OBJ_BOTCTL_MEDIA max-bytes": "media.max_store_bytes", "OBJ_BOTCTL_MEDIA max-age": "media.ttl", "BOTCTL_RESERVE max-bytes": "media.reserve_bytes"} {
		if m, ok := found[want]; !ok || m.Key != key {
			t.Errorf("mismatch %s: %+v, want one naming %s", want, m, key)
		}
	}
	if m := found["BOTCTL_RESERVE max-bytes"]; m.Deployed != "4194304" || m.Wanted != "0" {
		t.Errorf("reservation mismatch %+v: want deployed 4194304, wanted 0", m)
	}
	read, err := Mismatches(ctx, js, Options{})
	if err != nil || len(read) != len(tool.Mismatches()) {
		t.Errorf("Mismatches = %v, %v; Declare found %v", read, err, tool.Mismatches())
	}
}

// A media store deployed without a bound (by a botctl before the bound)
// is bounded by the first node that declares it, the one deployed limit
// Declare changes: its other settings and its files are kept, the change
// is logged, and it is no mismatch (config check --nats has nothing to
// report: the next node to start bounds it).
func TestDeclareBoundsAnUnboundedMediaStore(t *testing.T) {
	leakCheck(t)
	s := startServer(t)
	_, js := connect(t, s)
	ctx := ctxT(t)
	// The object store as a botctl without the bound created it.
	old, err := js.CreateObjectStore(ctx, natsjs.ObjectStoreConfig{Bucket: "BOTCTL_MEDIA", TTL: 2 * time.Hour, Storage: natsjs.FileStorage, Replicas: 1,
		Description: "botctl files users sent (images, files, videos), stored at receipt for the worker that runs the task; name = <task id>/<n>"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.PutBytes(ctx, "t_old/0", []byte("a file stored before the upgrade")); err != nil {
		t.Fatal(err)
	}
	if st, _ := js.Stream(ctx, "OBJ_BOTCTL_MEDIA"); st.CachedInfo().Config.MaxBytes != -1 {
		t.Fatalf("the old store has MaxBytes %d, want -1", st.CachedInfo().Config.MaxBytes)
	}
	if read, err := Mismatches(ctx, js, Options{MediaTTL: 2 * time.Hour}); err != nil || len(read) != 0 {
		t.Fatalf("Mismatches on the unbounded store = %v, %v; want none", read, err)
	}

	var logged strings.Builder
	st, err := Declare(ctx, js, Options{MediaTTL: time.Hour, Logger: zerolog.New(&logged)})
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(ctx, "OBJ_BOTCTL_MEDIA")
	if err != nil {
		t.Fatal(err)
	}
	c := info.CachedInfo().Config
	if c.MaxBytes != DefaultMediaMaxBytes || c.Discard != natsjs.DiscardNew {
		t.Fatalf("media stream after a node declared: MaxBytes %d, discard %v; want the default bound %d and DiscardNew", c.MaxBytes, c.Discard, int64(DefaultMediaMaxBytes))
	}
	if c.MaxAge != 2*time.Hour || c.Replicas != 1 {
		t.Errorf("media stream's MaxAge %s, replicas %d: want the deployed 2h and 1", c.MaxAge, c.Replicas)
	}
	if st.MediaMaxBytes() != DefaultMediaMaxBytes {
		t.Errorf("MediaMaxBytes() = %d, want %d", st.MediaMaxBytes(), int64(DefaultMediaMaxBytes))
	}
	for _, m := range st.Mismatches() {
		if m.Setting == "max-bytes" {
			t.Errorf("the bound applied is reported as kept: %v", m)
		}
	}
	if !strings.Contains(logged.String(), `"key":"media.max_store_bytes"`) || !strings.Contains(logged.String(), `"applied":4294967296`) {
		t.Errorf("no warning that the bound was applied:\n%s", logged.String())
	}
	if got, err := st.Media().GetBytes(ctx, "t_old/0"); err != nil || string(got) != "a file stored before the upgrade" {
		t.Errorf("the file stored before: %q, %v", got, err)
	}
	// Bounded now: a node with another bound keeps it.
	if again := declare(t, js, Options{MediaMaxBytes: 1 << 30}); again.MediaMaxBytes() != DefaultMediaMaxBytes {
		t.Errorf("a second node's Declare: bound %d, want the deployed %d", again.MediaMaxBytes(), int64(DefaultMediaMaxBytes))
	}
}
