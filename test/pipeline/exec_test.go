package pipeline

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/dispatch"
	"github.com/botctl/botctl/pkg/task"
)

// Tier 2's receiving side: a node's exec API takes a task message, runs it
// on its worker (tier "fixed"), and the leader's pusher delivers the answer
// (by push: the task has no stream on this connection).
func TestExecAPIRunsTask(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", nil)
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	c.post("alice", "hello") // alice has talked to the bot: pushes to her are allowed
	testwait.Eventually(t, waitLong, "first answered", func() bool { return answered(c.bot("alice"), "hello") == 1 })

	m := task.Message{TaskID: task.ID("b1", "tier2-1"), Bot: "b1", MsgID: "tier2-1", Chat: "alice", ChatType: "single",
		User: "alice", Question: "via the exec API", Received: time.Now()}
	raw, _ := json.Marshal(m)
	resp, err := n.post(dispatch.ExecPath, raw)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("exec API answered %s", resp.Status)
	}
	testwait.Eventually(t, waitLong, "run on tier fixed and delivered", func() bool {
		r := c.record(n, "tier2-1")
		return r.Exec == task.Succeeded && r.Tier == string(dispatch.TierFixed) && r.Delivery == task.Delivered
	})
	testwait.Eventually(t, waitLong, "pushed to the user", func() bool { return answered(c.bot("alice"), "via the exec API") == 1 })

	// Bad input is refused with a clear error.
	resp, err = n.post(dispatch.ExecPath, []byte(`{"nope":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad task message: %s", resp.Status)
	}
}

// post calls the node's API with its token.
func (n *runningNode) post(path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, n.api+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+n.token)
	return http.DefaultClient.Do(req)
}
