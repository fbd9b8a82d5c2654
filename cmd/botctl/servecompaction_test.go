package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/compaction"
	"github.com/botctl/botctl/pkg/config"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// serve compacts an external etcd every etcd.compact_retention, to the
// revision of one retention earlier; not the embedded etcd (it compacts
// itself), and not when etcd.compact_retention is 0.
func TestServeCompactsAnExternalEtcd(t *testing.T) {
	e := testenv.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	load := func(yaml string) config.Config {
		t.Helper()
		cfg, err := config.Load(write(t, yaml), nil)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if _, ok := externalCompactor(load("node_id: n1\n"), cli, zerolog.Nop()); ok {
		t.Fatal("a compactor for the embedded etcd")
	}
	external := fmt.Sprintf("node_id: n1\netcd:\n  endpoints: [%s]\n", e.Endpoints()[0])
	if _, ok := externalCompactor(load(external+"  compact_retention: 0s\n"), cli, zerolog.Nop()); ok {
		t.Fatal("a compactor with etcd.compact_retention 0")
	}
	c, ok := externalCompactor(load(external+"  compact_retention: 2h\n"), cli, zerolog.Nop())
	if !ok || c.Retention != 2*time.Hour {
		t.Fatalf("external etcd with etcd.compact_retention 2h: compactor %v, retention %s", ok, c.Retention)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	put := func() int64 {
		t.Helper()
		r, err := cli.Put(ctx, "/test/k", "v")
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	r0 := put()
	clk := fakeclock.New(time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC))
	c.Clock = clk
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(runCtx) }()
	defer func() { stop(); <-done }()
	clk.AwaitWaiters(t, 1)
	put()
	clk.Step(2 * time.Hour)
	testwait.Eventually(t, time.Minute, "etcd compacted to the revision one retention old", func() bool {
		h, err := compaction.Read(ctx, cli)
		return err == nil && h.Compacted == r0
	})
}
