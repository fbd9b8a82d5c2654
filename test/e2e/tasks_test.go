package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/test/e2e/cluster"
)

// botctl tasks against a running cluster: list, show, redeliver, retry,
// cancel, with --json shapes other tools rely on.
func TestTasksCommands(t *testing.T) {
	t.Parallel()
	// Answers take 4 s: long enough to catch one running, short enough.
	c := newClusterWith(t, []string{"b1"}, []string{"--ai", "demo", "--demo-answer-time", "4s"})
	startNodes(t, c, 1)
	waitStable(t, c)
	tasks := func(args ...string) string {
		t.Helper()
		code, stdout, stderr, err := cluster.Run(bin, 30*time.Second, append(append([]string{"tasks"}, args...), "--nats", c.NATSURL)...)
		if err != nil || code != 0 {
			t.Fatalf("botctl tasks %v: exit %d %v\n%s%s", args, code, err, stdout, stderr)
		}
		return stdout
	}
	type rec struct {
		ID       string `json:"id"`
		Bot      string `json:"bot"`
		Chat     string `json:"chat"`
		Exec     string `json:"exec"`
		Delivery string `json:"delivery"`
		Question string `json:"question"`
	}
	list := func(args ...string) []rec {
		var out struct {
			Tasks []rec `json:"tasks"`
		}
		raw := tasks(append([]string{"list", "--json"}, args...)...)
		if err := json.Unmarshal([]byte(raw), &out); err != nil {
			t.Fatalf("tasks list --json: %v\n%s", err, raw)
		}
		return out.Tasks
	}
	answers := func(chat, question string) int {
		tr, err := c.Transcript("b1", chat)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range tr {
			if e.From == "bot" && strings.HasPrefix(e.Content, "You asked: "+question+"\n") && (e.Finished || e.Kind == "markdown") {
				n++
			}
		}
		return n
	}

	if _, err := c.PostMessage("b1", "alice", "q1"); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 30*time.Second, testwait.Every, "answered", func() error {
		if answers("alice", "q1") != 1 {
			return fmt.Errorf("not yet")
		}
		if ts := list("--state", "delivered"); len(ts) != 1 {
			return fmt.Errorf("%d delivered tasks", len(ts))
		}
		return nil
	})
	ts := list("--bot", "b1")
	if len(ts) != 1 || ts[0].Exec != "succeeded" || ts[0].Delivery != "delivered" || ts[0].Question != "q1" || ts[0].Chat != "alice" {
		t.Fatalf("tasks = %+v", ts)
	}
	id := ts[0].ID
	if got := list("--bot", "nobody"); len(got) != 0 {
		t.Fatalf("--bot filter: %+v", got)
	}
	var shown struct {
		Task   rec `json:"task"`
		Output struct {
			Text string `json:"text"`
			Done bool   `json:"done"`
		} `json:"output"`
	}
	if err := json.Unmarshal([]byte(tasks("show", id, "--json")), &shown); err != nil || shown.Task.ID != id || !shown.Output.Done {
		t.Fatalf("show: %+v %v", shown, err)
	}

	tasks("redeliver", id)
	testwait.NoError(t, 30*time.Second, testwait.Every, "redelivered by push", func() error {
		if n := answers("alice", "q1"); n != 2 {
			return fmt.Errorf("answer seen %d times", n)
		}
		return nil
	})
	tasks("retry", id)
	testwait.NoError(t, 30*time.Second, testwait.Every, "retried and pushed", func() error {
		if n := answers("alice", "q1"); n != 3 {
			return fmt.Errorf("answer seen %d times", n)
		}
		return nil
	})

	// A running task, canceled by the operator.
	if _, err := c.PostMessage("b1", "bob", "long"); err != nil {
		t.Fatal(err)
	}
	var longID string
	testwait.NoError(t, 30*time.Second, testwait.Every, "running", func() error {
		for _, r := range list("--state", "running") {
			if r.Chat == "bob" {
				longID = r.ID
				return nil
			}
		}
		return fmt.Errorf("not running yet")
	})
	tasks("cancel", longID)
	testwait.NoError(t, 30*time.Second, testwait.Every, "canceled", func() error {
		for _, r := range list("--state", "canceled") {
			if r.ID == longID {
				return nil
			}
		}
		return fmt.Errorf("not canceled")
	})
	// The operator's cancel is the user's /stop: the user is told, and the
	// conversation takes a new question at once.
	testwait.NoError(t, 30*time.Second, testwait.Every, "bob told it stopped", func() error {
		tr, err := c.Transcript("b1", "bob")
		if err != nil {
			return err
		}
		for _, e := range tr {
			if e.From == "bot" && e.Finished && strings.Contains(e.Content, "已停止") {
				return nil
			}
		}
		return fmt.Errorf("no stopped note in %+v", tr)
	})
	if _, err := c.PostMessage("b1", "bob", "after the cancel"); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 30*time.Second, testwait.Every, "the next question answered", func() error {
		if n := answers("bob", "after the cancel"); n != 1 {
			return fmt.Errorf("answer seen %d times", n)
		}
		return nil
	})
}
