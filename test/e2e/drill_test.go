package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/test/e2e/cluster"
)

// botctl drill against a running cluster: a drop round measured from
// outside (T1 from the injection, T2, T3, messages lost), and the refusals.
func TestDrillDrop(t *testing.T) {
	t.Parallel()
	c := newClusterWith(t, []string{"b1"}, []string{"--ai", "demo", "--demo-answer-time", "2s"})
	startNodes(t, c, 2)
	waitStable(t, c)
	code, stdout, stderr, err := cluster.Run(bin, 3*time.Minute, "drill", "--bot", "b1", "--kind", "drop", "--rounds", "2",
		"--sim", c.SimHTTP, "--nats", c.NATSURL, "--interval", "300ms", "--settle", "90s", "--alert-wait", "-1s", "--json", "--fail-on-loss")
	if err != nil || code != 0 {
		t.Fatalf("botctl drill: exit %d %v\n%s\n%s", code, err, stdout, stderr)
	}
	var out struct {
		Kind   string `json:"kind"`
		Rounds []struct {
			Incident string  `json:"incident"`
			T1       float64 `json:"t1_s"`
			T2       float64 `json:"t2_s"`
			T3       float64 `json:"t3_s"`
			Sent     int     `json:"sent"`
			Lost     int     `json:"lost"`
			Method   string  `json:"method"`
			Error    string  `json:"error"`
		} `json:"rounds"`
		Summary struct {
			Rounds int `json:"rounds"`
			Lost   int `json:"lost"`
		} `json:"summary"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("drill --json: %v\n%s", err, stdout)
	}
	if out.Kind != "drop" || len(out.Rounds) != 2 || out.Summary.Lost != 0 {
		t.Fatalf("drill: %s", stdout)
	}
	for _, r := range out.Rounds {
		if r.Error != "" || r.Incident == "" || r.Sent == 0 || r.Lost != 0 || r.Method != "auto" || r.T1 < 0 || r.T2 < 0 || r.T3 < 0 {
			t.Fatalf("round: %+v\n%s", r, stdout)
		}
	}
	t.Logf("drill drop: %s", stdout)

	for _, bad := range [][]string{
		{"--kind", "drop", "--sim", "http://127.0.0.1:1"},
		{"--kind", "drop", "--sim", "https://openws.work.weixin.qq.com"},
		{"--kind", "meteor", "--sim", c.SimHTTP},
	} {
		args := append([]string{"drill", "--bot", "b1", "--nats", c.NATSURL}, bad...)
		code, _, stderr, _ := cluster.Run(bin, 30*time.Second, args...)
		if code != 2 || (!strings.Contains(stderr, "simulator") && !strings.Contains(stderr, "want one of")) {
			t.Fatalf("botctl %v: exit %d (want 2, a usage error)\n%s", args, code, stderr)
		}
	}
}
