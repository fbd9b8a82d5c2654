package dataplane_test

import (
	"context"
	"testing"
	"time"

	"github.com/botctl/botctl/dataplane"
	"github.com/botctl/botctl/internal/testenv"
)

// On R3, every bucket but the output is read from its stream leader: a
// direct get may be answered by a replica that has not applied the last
// write yet ("not found" right after a create, a stale revision for a
// CAS update). On R1 nothing changes.
func TestReplicatedBucketsReadFromTheLeader(t *testing.T) {
	urls := testenv.StartNATSCluster(t, 3)
	st, js := testenv.DeclareOnCluster(t, urls, dataplane.Options{Replicas: 3})
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
	st2, err := dataplane.Declare(ctx, js, dataplane.Options{Replicas: 3})
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
