package dataplane

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
	if c := info.CachedInfo().Config; c.MaxBytes != bound || c.Discard != jetstream.DiscardNew {
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
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = Declare(ctx, js, Options{MediaMaxBytes: 128 << 20, Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "media.max_store_bytes") {
		t.Fatalf("a media bound of 128 MiB on 64 MiB of storage: %v, want an error naming media.max_store_bytes", err)
	}
	// ReserveBytes keeps storage from the media bound for the others.
	_, err = Declare(ctx, js, Options{MediaMaxBytes: 40 << 20, ReserveBytes: 32 << 20, Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "media.max_store_bytes") || !strings.Contains(err.Error(), "media.reserve_bytes") {
		t.Fatalf("a media bound of 40 MiB and 32 MiB reserved on 64 MiB of storage: %v, want an error naming both keys", err)
	}
	if _, err := Declare(ctx, js, Options{MediaMaxBytes: 40 << 20, ReserveBytes: 16 << 20, Logger: testLogger(t)}); err != nil {
		t.Fatalf("a media bound of 40 MiB and 16 MiB reserved on 64 MiB of storage: %v", err)
	}
	st, err := js.Stream(ctx, "BOTCTL_RESERVE")
	if err != nil || st.CachedInfo().Config.MaxBytes != 16<<20 {
		t.Fatalf("reservation stream: %v", err)
	}
	_, err = Declare(ctx, js, Options{MediaMaxBytes: 40 << 20, ReserveBytes: 100 << 20, Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "media.reserve_bytes") {
		t.Fatalf("100 MiB reserved on 64 MiB of storage: %v, want an error naming media.reserve_bytes", err)
	}
	if _, err := Declare(ctx, js, Options{MediaMaxBytes: 16 << 20, Logger: testLogger(t)}); err != nil {
		t.Fatalf("a media bound of 16 MiB on 64 MiB of storage, nothing reserved: %v", err)
	}
	if _, err := js.Stream(ctx, "BOTCTL_RESERVE"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("reservation stream with ReserveBytes 0: %v, want it removed", err)
	}
}

// A tool that opens a deployment with Deployed's options keeps the
// nodes' media TTL, bound and reservation (a default Declare would set
// the bound back to 4 GiB and remove the reservation).
func TestDeployedKeepsTheMediaBound(t *testing.T) {
	leakCheck(t)
	s := startServer(t)
	_, js := connect(t, s)
	want := Options{Prefix: "BOTCTL", Replicas: 1, MediaTTL: 2 * time.Hour, MediaMaxBytes: 8 << 20, ReserveBytes: 4 << 20}
	declare(t, js, want)
	ctx := ctxT(t)
	got := Deployed(ctx, js, "BOTCTL")
	if got.Prefix != want.Prefix || got.Replicas != want.Replicas || got.MediaTTL != want.MediaTTL || got.MediaMaxBytes != want.MediaMaxBytes || got.ReserveBytes != want.ReserveBytes {
		t.Fatalf("Deployed = %+v, want %+v", got, want)
	}
	declare(t, js, got)
	media, err := js.Stream(ctx, "OBJ_BOTCTL_MEDIA")
	if err != nil || media.CachedInfo().Config.MaxBytes != 8<<20 {
		t.Fatalf("media bound after a tool's Declare: %v", err)
	}
	if _, err := js.Stream(ctx, "BOTCTL_RESERVE"); err != nil {
		t.Fatalf("reservation after a tool's Declare: %v", err)
	}
}
