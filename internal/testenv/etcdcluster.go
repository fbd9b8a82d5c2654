package testenv

import (
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/infra"
	"go.etcd.io/etcd/server/v3/embed"
)

// StartEtcdCluster starts an n-member etcd cluster in this process (no
// fsync, loopback, free ports) and returns each member's client URL; every
// member is stopped when the test ends. For faults that need a member of
// a real cluster: put a faultproxy in front of one URL and freeze it.
func StartEtcdCluster(t testing.TB, n int) []string {
	t.Helper()
	type member struct {
		name         string
		client, peer url.URL
	}
	ms := make([]member, n)
	var initial []string
	addrs, err := infra.FreeAddrs(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ms {
		c, p := addrs[2*i], addrs[2*i+1]
		ms[i] = member{name: fmt.Sprintf("m%d", i+1), client: url.URL{Scheme: "http", Host: c}, peer: url.URL{Scheme: "http", Host: p}}
		initial = append(initial, ms[i].name+"="+ms[i].peer.String())
	}
	base := t.TempDir()
	started := make([]*embed.Etcd, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range ms {
		cfg := embed.NewConfig()
		cfg.Name = m.name
		cfg.Dir = fmt.Sprintf("%s/%s", base, m.name)
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{m.client}, []url.URL{m.client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{m.peer}, []url.URL{m.peer}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "testenv"
		cfg.UnsafeNoFsync = true
		cfg.EnableGRPCGateway = false
		cfg.LogLevel = "error"
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			t.Fatalf("start etcd member %s: %v", m.name, err)
		}
		started[i] = e
		t.Cleanup(e.Close)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			select {
			case <-e.Server.ReadyNotify():
			case <-time.After(time.Minute):
				errs[i] = fmt.Errorf("etcd member %s not ready after a minute", ms[i].name)
			}
		}(i)
	}
	wg.Wait()
	var urls []string
	for i, m := range ms {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		urls = append(urls, m.client.String())
	}
	return urls
}
