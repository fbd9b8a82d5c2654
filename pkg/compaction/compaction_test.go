package compaction

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestReadFindsTheCompactRevision(t *testing.T) {
	e := testenv.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var last int64
	for i := 0; i < 60; i++ {
		r, err := cli.Put(ctx, fmt.Sprintf("/test/k%d", i%7), "v")
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
	}
	h, err := Read(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	if h.Compacted != 0 || h.Revision != last {
		t.Fatalf("before any compaction: %+v, want revision %d, compacted 0", h, last)
	}
	for _, at := range []int64{2, 37, last - 1, last} {
		if _, err := cli.Compact(ctx, at); err != nil {
			t.Fatal(err)
		}
		h, err := Read(ctx, cli)
		if err != nil {
			t.Fatal(err)
		}
		if h.Compacted != at || h.Revision != last {
			t.Fatalf("compacted at %d: read %+v, want revision %d, compacted %d", at, h, last, at)
		}
	}
}

func TestWarningNamesTheFix(t *testing.T) {
	for _, c := range []struct {
		h    History
		warn string
	}{
		{History{Revision: 50_000}, ""},                          // young cluster
		{History{Revision: 3_000_000, Compacted: 2_900_000}, ""}, // compacting
		{History{Revision: NeverCompactedAfter + 1}, "never compacted"},
		{History{Revision: 9_000_000, Compacted: 1_000_000}, "8000000 revisions"},
	} {
		w := c.h.Warning()
		if c.warn == "" && w != "" || c.warn != "" && (!strings.Contains(w, c.warn) || !strings.Contains(w, "--auto-compaction-retention")) {
			t.Errorf("%+v: warning %q, want one with %q and the fix", c.h, w, c.warn)
		}
	}
}
