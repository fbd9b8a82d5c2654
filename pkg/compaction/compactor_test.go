package compaction

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The compactor keeps one Retention of history: each tick compacts to the
// revision of the tick before, never to a newer one; a compaction someone
// else did further is no error.
func TestCompactorKeepsOneRetention(t *testing.T) {
	e := testenv.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	write := func() int64 {
		t.Helper()
		var last int64
		for i := range 10 {
			r, err := cli.Put(ctx, fmt.Sprintf("/test/k%d", i), "v")
			if err != nil {
				t.Fatal(err)
			}
			last = r.Header.Revision
		}
		return last
	}
	compacted := func() int64 {
		h, err := Read(ctx, cli)
		if err != nil {
			t.Fatal(err)
		}
		return h.Compacted
	}

	r0 := write()
	clk := fakeclock.New(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC))
	var logs testenv.LogBuffer
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Compactor{Client: cli, Retention: time.Hour, Clock: clk, Log: zerolog.New(&logs)}.Run(runCtx)
	}()
	defer func() { stop(); <-done }()
	clk.AwaitWaiters(t, 1) // r0 seen, the ticker armed

	r1 := write()
	if c := compacted(); c != 0 {
		t.Fatalf("compacted to %d before a Retention passed", c)
	}
	clk.Step(time.Hour)
	testwait.Eventually(t, time.Minute, "compacted to the revision one Retention old", func() bool { return compacted() == r0 })

	r2 := write()
	clk.Step(time.Hour)
	testwait.Eventually(t, time.Minute, "compacted to the next tick's revision", func() bool { return compacted() == r1 })

	// Someone compacts further; the compactor's next, older compaction is
	// no error and undoes nothing, and the one after goes on from there.
	if _, err := cli.Compact(ctx, r2); err != nil {
		t.Fatal(err)
	}
	r3 := write()
	clk.Step(time.Hour) // compacts to r2 again: done already
	testwait.Eventually(t, time.Minute, "the third tick handled", func() bool {
		return strings.Count(logs.String(), "compacted etcd's history") == 3
	})
	clk.Step(time.Hour)
	testwait.Eventually(t, time.Minute, "compacted to r3", func() bool { return compacted() == r3 })
	if got := logs.String(); bytes.Contains([]byte(got), []byte(`"level":"warn"`)) {
		t.Fatalf("a compaction done already was logged as a failure:\n%s", got)
	}
}
