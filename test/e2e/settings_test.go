package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/test/e2e/cluster"
)

// A bot's override in etcd whose backend no node can build (openai, its
// key variable set nowhere) never takes the cluster down: botctl bots set
// refuses it unless --force, every node refuses it, and after every node
// is killed and started again (a power cycle) each comes up, b1 answers
// with the nodes' own settings (the demo), and botctl status and /readyz
// show the refusal until the override is cleared.
func TestEveryNodeRestartsWithAnOverrideNoneCanBuild(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "") // neither the nodes nor the CLI below have it
	os.Unsetenv("OPENAI_API_KEY")
	c := newCluster(t, []string{"b1"})
	startNodes(t, c, 3)
	waitStable(t, c)

	set := func(args ...string) (int, string) {
		t.Helper()
		code, stdout, stderr, err := cluster.Run(bin, 30*time.Second, append([]string{"bots", "set", "--etcd", c.EtcdURL, "--bot", "b1"}, args...)...)
		if err != nil {
			t.Fatalf("botctl bots set %v: %v", args, err)
		}
		return code, stdout + stderr
	}
	openai := []string{"--set", "ai.kind=openai", "--set", "ai.openai.model=gpt-4o-mini"}
	if code, out := set(openai...); code != 2 || !strings.Contains(out, "OPENAI_API_KEY") || !strings.Contains(out, "nothing stored") {
		t.Fatalf("bots set of a backend this machine cannot build: exit %d\n%s\nwant exit 2 naming OPENAI_API_KEY, nothing stored", code, out)
	}
	if code, out := set(append(openai, "--force")...); code != 0 {
		t.Fatalf("bots set --force: exit %d\n%s", code, out)
	}
	refusing := func(n *cluster.Node) error {
		var rd struct {
			Ready    bool     `json:"ready"`
			Warnings []string `json:"warnings"`
		}
		if err := cluster.GetJSON(n.API+"/readyz", &rd); err != nil { // 503: not ready
			return err
		}
		if !rd.Ready || len(rd.Warnings) != 1 || !strings.Contains(rd.Warnings[0], "bot b1:") || !strings.Contains(rd.Warnings[0], "OPENAI_API_KEY") {
			return fmt.Errorf("node %s: /readyz ready %v, warnings %q: want ready, warning of b1's override refused for OPENAI_API_KEY", n.ID, rd.Ready, rd.Warnings)
		}
		return nil
	}
	for _, n := range c.Nodes() {
		testwait.NoError(t, 30*time.Second, 200*time.Millisecond, n.ID+" refuses the override", func() error { return refusing(n) })
	}

	// A power cycle: every node killed, then every node started again.
	for _, n := range c.Nodes() {
		n.Proc.Kill()
	}
	for _, n := range c.Nodes() {
		if _, err := c.RestartNode(n.ID); err != nil {
			t.Fatalf("node %s did not start again with the override in etcd: %v", n.ID, err)
		}
	}
	waitStable(t, c)
	if _, err := c.PostMessage("b1", "u1", "after the power cycle"); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, time.Minute, 200*time.Millisecond, "b1 answered with the demo", func() error {
		if n, tr := finals(t, c, "u1", "after the power cycle"); n != 1 {
			return fmt.Errorf("%d demo answers, want 1: %+v", n, tr)
		}
		return nil
	})
	type bot struct {
		ID      string `json:"id"`
		Refused []struct {
			Node     string `json:"node"`
			Revision int64  `json:"revision"`
			Reason   string `json:"reason"`
			Serving  int64  `json:"serving"`
		} `json:"settings_refused"`
	}
	status := func() bot {
		t.Helper()
		raw, err := c.Status(ctxTimeout(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Bots []bot `json:"bots"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, raw)
		}
		for _, b := range st.Bots {
			if b.ID == "b1" {
				return b
			}
		}
		t.Fatalf("status --json has no b1:\n%s", raw)
		return bot{}
	}
	for _, n := range c.Nodes() {
		testwait.NoError(t, 30*time.Second, 200*time.Millisecond, n.ID+" refuses the override after its restart", func() error { return refusing(n) })
	}
	b := status()
	if len(b.Refused) != 3 {
		t.Fatalf("status: b1's settings_refused %+v, want every node's", b.Refused)
	}
	for _, r := range b.Refused {
		if r.Revision == 0 || r.Serving != 0 || !strings.Contains(r.Reason, "OPENAI_API_KEY") {
			t.Errorf("status: %s's refusal %+v, want the override refused for OPENAI_API_KEY, the file's settings served", r.Node, r)
		}
	}

	// Cleared: every node applies the file's settings, nothing refused.
	if code, out := set("--clear"); code != 0 {
		t.Fatalf("bots set --clear: exit %d\n%s", code, out)
	}
	testwait.NoError(t, 30*time.Second, 500*time.Millisecond, "the refusals gone", func() error {
		if b := status(); len(b.Refused) != 0 {
			return fmt.Errorf("b1's settings_refused %+v after --clear", b.Refused)
		}
		return nil
	})
}
