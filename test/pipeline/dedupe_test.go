package pipeline

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// A duplicate callback of a message handled long ago: its task is
// recorded, but the queue no longer remembers its msgid (past the duplicate
// window), so the publish, which runs beside the dedupe read, queues it
// again. The user hears nothing about it, and the worker that pulls the
// stray queue message finds the task finished and removes it: the
// conversation is not locked, and the next question is answered.
func TestDuplicatePastTheQueueWindowIsSilentAndLocksNothing(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", nil)
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()

	// The task as it was left an hour ago: answered and delivered.
	const msgid, old = "handled-an-hour-ago", "asked an hour ago"
	r := task.New("b1", msgid, time.Now().Add(-time.Hour).UTC())
	r.Chat, r.ChatType, r.User, r.Question = "alice", "single", "alice", old
	r.Exec, r.Delivery, r.Attempt = task.Succeeded, task.Delivered, 1
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.node.Store.Tasks().Create(ctx, r.ID, raw); err != nil {
		t.Fatal(err)
	}

	dupsBefore := n.node.Access.Stats().Duplicates
	// Redelivered as WeCom would: with its own create_time, an hour ago
	// (a callback created after the connection is fresh: no read).
	c.postAs(wecomsim.MessageRequest{UserID: "alice", Text: old, MsgID: msgid, CreateTime: r.Received.Unix()})
	testwait.Eventually(t, waitLong, "the callback taken for a duplicate", func() bool { return n.node.Access.Stats().Duplicates == dupsBefore+1 })
	testwait.Eventually(t, waitLong, "the stray queue message removed", func() bool {
		m, err := n.node.Store.ConversationTask(ctx, "b1", "alice")
		return err == nil && m == nil
	})

	c.post("alice", "a new question")
	testwait.Eventually(t, waitLong, "the new question answered", func() bool { return answered(c.bot("alice"), "a new question") == 1 })
	for _, e := range c.bot("alice") {
		if e.ReplyTo == msgid {
			t.Fatalf("the duplicate got a reply: %+v", e)
		}
	}
	if got, err := n.node.Lifecycle.Get(ctx, r.ID); err != nil || got.Exec != task.Succeeded || got.Attempt != 1 {
		t.Fatalf("the old task was touched: %+v %v", got, err)
	}
}
