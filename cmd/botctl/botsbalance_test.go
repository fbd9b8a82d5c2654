package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/node"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// skewed makes a cluster in etcd where node a leads bots b0…b3 and node b,
// registered as balancing too, waits behind it in every queue (real
// candidacies, held until the test ends).
func skewed(t *testing.T) string {
	t.Helper()
	e := testenv.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		info := node.Info{ID: id, Started: time.Now(), Bots: map[string]node.BotStatus{},
			Balance: &node.BalanceSettings{Tolerance: 0.1, CooldownMS: 600_000, IntervalMS: 10_000, MaxMoves: 20}}
		raw, _ := json.Marshal(info)
		if _, err := cli.Put(ctx, prefix+"nodes/"+id, string(raw), clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
	}
	bots := []string{"b0", "b1", "b2", "b3"}
	for _, id := range []string{"a", "b"} {
		for _, bot := range bots {
			el, err := election.New(cli, election.Config{BotID: bot, NodeID: id, TTL: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			go el.Campaign(ctx) // a wins; b waits until the test ends
		}
		if id == "a" {
			testwait.Eventually(t, 30*time.Second, "a leads every bot", func() bool {
				for _, bot := range bots {
					if l, err := election.Leader(ctx, cli, "", bot); err != nil || l.Node != "a" {
						return false
					}
				}
				return true
			})
		}
	}
	testwait.Eventually(t, 30*time.Second, "b queued for every bot", func() bool {
		q, _, err := election.Queues(ctx, cli, "")
		if err != nil {
			return false
		}
		for _, bot := range bots {
			if len(q[bot]) != 2 {
				return false
			}
		}
		return true
	})
	return strings.Join(e.Endpoints(), ",")
}

// bots balance --dry-run prints the moves that bring a and b to 2 bots
// each, with why; --json says the same; without --dry-run it refuses.
// status shows the spread, in its text and its JSON.
func TestBotsBalanceDryRunAndStatusSpread(t *testing.T) {
	etcd := skewed(t)

	out, errOut, code := runBotctl(t, "bots", "balance", "--dry-run", "--etcd", etcd)
	if code != 0 || !strings.Contains(out, "would move 2 bot(s) (dry run: nothing moved)") || strings.Count(out, "a leads 4, above its band 2–2") != 1 {
		t.Fatalf("dry run: code %d\n%s%s", code, out, errOut)
	}
	for _, row := range []string{"b0 a b -", "b1 a b -"} {
		if !hasRow(out, row) {
			t.Fatalf("dry run lacks the row %q:\n%s", row, out)
		}
	}

	out, errOut, code = runBotctl(t, "bots", "balance", "--dry-run", "--json", "--etcd", etcd)
	var v BalanceView
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("dry run --json: code %d\n%s%s", code, out, errOut)
	}
	if !v.DryRun || len(v.Moves) != 2 || v.After["a"] != 2 || v.After["b"] != 2 || v.CooldownS != 600 || len(v.Spread) != 2 {
		t.Fatalf("dry run --json: %+v", v)
	}
	for _, m := range v.Moves {
		if m.From != "a" || m.To != "b" || m.Reason == "" || len(m.Ahead) != 0 {
			t.Fatalf("move %+v", m)
		}
	}

	if _, errOut, code = runBotctl(t, "bots", "balance", "--etcd", etcd); code != 2 || !strings.Contains(errOut, "give --dry-run") {
		t.Fatalf("without --dry-run: code %d, %s", code, errOut)
	}

	out, errOut, code = runBotctl(t, "status", "--json", "--etcd", etcd, "--nats", "nats://127.0.0.1:1")
	var st struct {
		Nodes []struct {
			ID     string           `json:"id"`
			Spread *node.NodeSpread `json:"spread"`
		} `json:"nodes"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.Nodes) != 2 {
		t.Fatalf("status --json: code %d\n%s%s", code, out, errOut)
	}
	want := map[string]int{"a": 4, "b": 0}
	for _, n := range st.Nodes {
		if n.Spread == nil || n.Spread.Leads != want[n.ID] || n.Spread.Share != 2 || n.Spread.Low != 2 || n.Spread.High != 2 {
			t.Fatalf("status --json, node %s spread %+v", n.ID, n.Spread)
		}
	}
	out, _, _ = runBotctl(t, "status", "--etcd", etcd, "--nats", "nats://127.0.0.1:1")
	for _, row := range []string{"SPREAD LEADS SHARE BAND", "a 4 2.0 2–2 above", "b 0 2.0 2–2 below"} {
		if !hasRow(out, row) {
			t.Fatalf("status lacks the row %q:\n%s", row, out)
		}
	}
}

// hasRow says whether a line of out starts with row's fields.
func hasRow(out, row string) bool {
	want := strings.Fields(row)
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= len(want) && slices.Equal(f[:len(want)], want) {
			return true
		}
	}
	return false
}
