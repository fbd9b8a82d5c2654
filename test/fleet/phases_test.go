package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/botctl/botctl/test/e2e/cluster"
)

// A deposition's line as a node logs it (the cluster's capture time, then
// the logger's own) gives its time and bot; the first deposition after
// the kill counts, of the bots asked about.
func TestDepositionsReadFromTheStandbysLogs(t *testing.T) {
	dir := t.TempDir()
	line := func(at, bot string) string {
		return "22:32:14.898 " + at + " WRN deposed the leader: its liveness pulse stood still (confirmed by a linearizable read; deletion compared on it) at_rev=311 bot=" + bot +
			" confirm_rtt=3.526 key=/botctl/elect/" + bot + "/4b39a252a12fa11d leader=n3 lease=4b39a252a12fa11d node=n1 pulse=205 unseen_for=3004\n"
	}
	n1 := "22:32:10.000 2026-12-07T22:32:10.000Z INF leading: WeCom connection up bot=b0001\n" +
		line("2026-12-07T22:32:09.000Z", "b0001") + // before the kill
		line("2026-12-07T22:32:14.500Z", "b0001") +
		line("2026-12-07T22:32:14.900Z", "b0003") // not one of the killed node's
	n2 := line("2026-12-07T22:32:14.200Z", "b0002") + line("2026-12-07T22:32:15.000Z", "b0001")
	for name, body := range map[string]string{"node n1 (start 1)": n1, "node n2 (start 2)": n2} {
		if err := os.WriteFile(filepath.Join(dir, cluster.LogFileName(name)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2026, 12, 7, 22, 32, 11, 0, time.UTC)
	got := depositions(dir, []string{"n1", "n2", "n3"}, map[string]bool{"b0001": true, "b0002": true}, t0)
	want := map[string]time.Duration{"b0001": 3500 * time.Millisecond, "b0002": 3200 * time.Millisecond}
	if len(got) != len(want) || got["b0001"] != want["b0001"] || got["b0002"] != want["b0002"] {
		t.Fatalf("depositions = %v, want %v", got, want)
	}
}
