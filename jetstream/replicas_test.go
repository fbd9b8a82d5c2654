package jetstream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/rs/zerolog"
)

// On R3, every bucket but the output is read from its stream leader: a
// direct get may be answered by a replica that has not applied the last
// write yet ("not found" right after a create, a stale revision for a
// CAS update). On R1 nothing changes.
func TestReplicatedBucketsReadFromTheLeader(t *testing.T) {
	urls := testenv.StartNATSCluster(t, 3)
	st, js := testenv.DeclareOnCluster(t, urls, jetstream.Options{Replicas: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := st.Names()
	for bucket, direct := range map[string]bool{n.TasksBucket: false, n.SeenBucket: false, n.IncidentsBucket: false, n.OutputBucket: false, n.ProgressBucket: true} {
		s, err := js.Stream(ctx, "KV_"+bucket)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.AllowDirect; got != direct {
			t.Errorf("bucket %s: allow_direct %v, want %v", bucket, got, direct)
		}
		if got := s.CachedInfo().Config.Replicas; got != 3 {
			t.Errorf("bucket %s: %d replicas, want 3", bucket, got)
		}
	}
	// A second declare (another node starting) keeps it so, and the
	// store's handles read through the leader: a create is seen at once.
	st2, err := jetstream.Declare(ctx, js, jetstream.Options{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		key := "k" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if _, err := st2.Tasks().Create(ctx, key, []byte("v")); err != nil {
			t.Fatal(err)
		}
		if _, err := st2.Tasks().Get(ctx, key); err != nil {
			t.Fatalf("read right after create: %v", err)
		}
	}
}

// A node started without nats.replicas (1) on an R3 deployment leaves
// every stream, bucket, the object store and the consumer at R3, and
// reports each one, naming the key; Mismatches finds the same without
// changing anything.
func TestDeclareKeepsDeployedReplicas(t *testing.T) {
	urls := testenv.StartNATSCluster(t, 3)
	first, js := testenv.DeclareOnCluster(t, urls, jetstream.Options{Replicas: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var logged strings.Builder
	st, err := jetstream.Declare(ctx, js, jetstream.Options{Logger: zerolog.New(&logged)})
	if err != nil {
		t.Fatal(err)
	}
	n := first.Names()
	streams := []string{n.TaskStream, "OBJ_" + n.MediaBucket}
	for _, b := range []string{n.TasksBucket, n.OutputBucket, n.ProgressBucket, n.ContextBucket, n.WatermarksBucket,
		n.PendingBucket, n.SeenBucket, n.HealthBucket, n.IncidentsBucket, n.LimitsBucket} {
		streams = append(streams, "KV_"+b)
	}
	for _, name := range streams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.Replicas; got != 3 {
			t.Errorf("stream %s: %d replicas after a node declared with 1, want the deployed 3", name, got)
		}
	}
	c, err := js.Consumer(ctx, n.TaskStream, n.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.Replicas; got != 3 {
		t.Errorf("consumer: %d replicas, want the deployed 3", got)
	}
	if got := st.Options().Replicas; got != 3 {
		t.Errorf("Options().Replicas = %d, want the deployed 3", got)
	}

	want := map[string]bool{n.TaskStream + "/" + n.Consumer: true}
	for _, s := range streams {
		want[s] = true
	}
	for _, m := range st.Mismatches() {
		if m.Setting != "replicas" || m.Key != "nats.replicas" || m.Deployed != "3" || m.Wanted != "1" {
			t.Errorf("mismatch %+v: want replicas, nats.replicas, deployed 3, wanted 1", m)
		}
		delete(want, m.Stream)
	}
	if len(want) > 0 {
		t.Errorf("no replicas mismatch reported for %v", want)
	}
	if !strings.Contains(logged.String(), `"key":"nats.replicas"`) || !strings.Contains(logged.String(), `"level":"warn"`) {
		t.Errorf("no warning naming nats.replicas in the log:\n%s", logged.String())
	}
	read, err := jetstream.Mismatches(ctx, js, jetstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != len(st.Mismatches()) {
		t.Errorf("Mismatches found %d, Declare %d:\n%v\n%v", len(read), len(st.Mismatches()), read, st.Mismatches())
	}
}
