package etcdkv

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const dir = "/test/records/"

func text(key, value []byte, rev int64) (string, error) {
	if string(value) == "bad" {
		return "", fmt.Errorf("%s is not a record", key)
	}
	return string(key[len(dir):]) + "=" + string(value), nil
}

// A watch that etcd compacted past (a change made between the read and
// the watch, then compacted) is read again in full: the record deleted
// meanwhile is applied as deleted, the one changed with its new value,
// and the watch then carries on; a value the decoder refuses is skipped,
// and one applied before that the fresh read refuses (corrupt, or written
// by a newer botctl) keeps what was applied, not deleted.
func TestWatchReadsAgainAfterCompaction(t *testing.T) {
	e := testenv.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	put := func(k, v string) {
		t.Helper()
		if _, err := cli.Put(ctx, dir+k, v); err != nil {
			t.Fatal(err)
		}
	}
	put("a", "1")
	put("b", "1")
	put("e", "1")

	first := true
	listed = func() {
		if !first {
			return
		}
		first = false
		put("b", "2")
		put("e", "bad")
		if _, err := cli.Delete(ctx, dir+"a"); err != nil {
			t.Error(err)
		}
		resp, err := cli.Get(ctx, "/test/none")
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
			t.Error(err)
		}
	}
	defer func() { listed = func() {} }()

	var mu sync.Mutex
	now := map[string]string{}
	var wg sync.WaitGroup
	wg.Go(func() {
		Watch(ctx, cli, dir, text, func(s string) string { return s[:1] }, func(ev Event[string]) {
			mu.Lock()
			defer mu.Unlock()
			if ev.Deleted {
				delete(now, ev.Name)
				return
			}
			now[ev.Name] = ev.Record
		}, "test records", zerolog.Nop())
	})
	state := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprint(now)
	}
	testwait.Eventually(t, 30*time.Second, "the state after the compaction", func() bool { return state() == "map[b:b=2 e:e=1]" })
	put("c", "bad")
	put("d", "1")
	testwait.Eventually(t, 30*time.Second, "the watch carrying on", func() bool { return state() == "map[b:b=2 d:d=1 e:e=1]" })
	cancel()
	wg.Wait()
}
