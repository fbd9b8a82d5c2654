package serve

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/pkg/compaction"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The node reads etcd's compaction from the cluster itself and reports it
// in /metrics; a history that shows no compaction is a warning (issue 25
// item 9). Writing 100,000 revisions takes too long for a test, so the
// second half puts such a history in the cache, as a read would.
func TestEtcdHistoryInMetrics(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		if _, err := cli.Put(ctx, "/test/k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	r, err := cli.Compact(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	h := &etcdHistory{cli: cli, log: zerolog.Nop()}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h)
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("%s not in /metrics", name)
		return 0
	}
	if got, want := gauge("botctl_etcd_revisions_uncompacted"), r.Header.Revision-10; int64(got) != want {
		t.Fatalf("botctl_etcd_revisions_uncompacted = %v, want %d", got, want)
	}
	if w, g := h.warning(ctx), gauge("botctl_etcd_compaction_warning"); w != "" || g != 0 {
		t.Fatalf("a compacted history warns: %q, gauge %v", w, g)
	}

	h.mu.Lock()
	h.h = compaction.History{Revision: compaction.NeverCompactedAfter + 5}
	h.mu.Unlock()
	if w := h.warning(ctx); !strings.Contains(w, "never compacted") {
		t.Fatalf("warning %q, want one saying etcd never compacted", w)
	}
	if g := gauge("botctl_etcd_compaction_warning"); g != 1 {
		t.Fatalf("botctl_etcd_compaction_warning = %v with a never-compacted history, want 1", g)
	}
}
