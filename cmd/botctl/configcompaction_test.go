package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// config check --etcd reads the configured cluster's history (issue 25
// item 9); without --etcd nothing is contacted.
func TestConfigCheckReadsEtcdCompaction(t *testing.T) {
	e := testenv.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for i := 0; i < 12; i++ {
		if _, err := cli.Put(context.Background(), "/test/k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Compact(context.Background(), 9); err != nil {
		t.Fatal(err)
	}
	p := write(t, fmt.Sprintf("etcd:\n  endpoints: [%s]\n", e.Endpoints()[0]))
	out, stderr, code := runBotctl(t, "config", "check", "--etcd", p)
	if code != 0 || !strings.Contains(out, "compacted at 9") || strings.Contains(stderr, "warning") {
		t.Fatalf("config check --etcd: exit %d\n%s%s", code, out, stderr)
	}
	out, _, code = runBotctl(t, "config", "check", p)
	if code != 0 || strings.Contains(out, "etcd history") {
		t.Fatalf("config check without --etcd asked etcd: exit %d\n%s", code, out)
	}
}
