package pipeline

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// awaitFresh waits until messages posted now are fresh for the leader's
// connection (created past access's 5 s margin after it was subscribed)
// and its pusher has found every undelivered task (Idle can say yes).
func awaitFresh(t *testing.T, c *cluster, n *runningNode) {
	t.Helper()
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	from := time.Now()
	testwait.Eventually(t, waitLong, "the pusher's rebuild done", func() bool {
		p := n.node.Pusher("b1")
		return p != nil && p.Idle("nobody")
	})
	time.Sleep(time.Until(from.Add(7 * time.Second))) // the margin, and create_time's whole seconds
}

// A fresh message in an idle conversation gets its receipt beside the
// queue publish (not after it); the answer follows on that stream, once.
func TestEarlyReceiptThenAnswer(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", nil)
	awaitFresh(t, c, n)

	q := c.post("alice", "early")
	testwait.Eventually(t, waitLong, "answered", func() bool { return answered(c.bot("alice"), "early") == 1 })
	if s := n.node.Access.Stats(); s.EarlyReceipts != 1 || s.EarlyMissed != 0 || s.Dispatched != 1 {
		t.Fatalf("access stats %+v, want one early receipt, no miss", s)
	}
	r := c.record(n, q.MsgID)
	if r.StreamStart.IsZero() || r.StreamID != "s-"+r.ID {
		t.Fatalf("the record does not carry the receipt: %+v", r)
	}
	// One stream: the receipt, continued by the pusher to the answer.
	bot := c.bot("alice")
	if len(bot) != 1 || !bot[0].Finished || bot[0].ReplyTo != q.MsgID {
		t.Fatalf("alice sees %+v", bot)
	}
}

// The prediction misses: the conversation has a task the pusher does not
// know of (queued, not yet run: the only worker slot is taken), so the
// early receipt's stream is finished with the busy reply; nothing runs
// the refused question, and the user is not left at "received".
func TestEarlyReceiptOfABusyConversationFinishedBusy(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := busyUnannounced(t, c)
	q := c.post("alice", "refused")
	testwait.Eventually(t, waitLong, "the stream finished", func() bool {
		for _, e := range c.bot("alice") {
			if e.ReplyTo == q.MsgID && e.Finished {
				return true
			}
		}
		return false
	})
	if s := n.node.Access.Stats(); s.EarlyReceipts != 2 || s.EarlyMissed != 1 || s.Busy != 1 {
		t.Fatalf("access stats %+v, want two early receipts (bob's, alice's), alice's missed: busy", s)
	}
	bot := c.bot("alice")
	if len(bot) != 1 || bot[0].ReplyTo != q.MsgID || !strings.Contains(bot[0].Content, "还在处理中") {
		t.Fatalf("alice sees %+v, want one stream finished with the busy reply", bot)
	}
	if r := c.record(n, q.MsgID); r.ID != "" {
		t.Fatalf("the refused question has a task record: %+v", r)
	}
	if st, _ := c.sim.Stats("b1"); st.QuotaRejections != 0 {
		t.Fatalf("quota rejections %d", st.QuotaRejections)
	}
}

// busyUnannounced starts one node with one worker slot, which bob's
// minute-long task takes, and puts a task for alice's conversation
// straight on the queue: no record, no announcement, so the pusher does
// not know of it. Alice's next message gets an early receipt (her
// conversation looks idle), and its publish then finds her conversation
// busy.
func busyUnannounced(t *testing.T, c *cluster) *runningNode {
	t.Helper()
	n := c.start("n1", func(cfg *config.Config) {
		cfg.Worker.Slots, cfg.Worker.LeaderSlots = 1, 1
		cfg.AI.Demo.AnswerTime = time.Minute
	})
	awaitFresh(t, c, n)
	c.post("bob", "takes the only slot")
	testwait.Eventually(t, waitLong, "bob's task running", func() bool { return n.node.Worker.Busy() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	stray := task.New("b1", "stray", time.Now().UTC())
	stray.Chat, stray.ChatType, stray.User, stray.Question = "alice", "single", "alice", "queued elsewhere"
	raw, err := json.Marshal(task.MessageOf(stray))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.node.Store.PublishTask(ctx, "b1", "alice", "stray", raw); err != nil {
		t.Fatal(err)
	}
	if !n.node.Pusher("b1").Idle("alice") {
		t.Fatal("the pusher knows of the stray task: the test proves nothing")
	}
	return n
}

// A message the gap backfill took (its callback never came) is answered
// late, by push. If WeCom then delivers its callback after all, the
// callback is fresh (created after the connection) and its conversation
// idle once the late answer is delivered: without the backfill's mark in
// the dedupe memory it would get an early receipt, a stream left at
// "received" beside the answer. It gets nothing. The message is known
// under its WeCom history id as well, for a pass over WeCom's history.
func TestCallbackAfterItsBackfillIsSilent(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", nil)
	awaitFresh(t, c, n)
	if err := c.sim.Fault(wecomsim.FaultRequest{BotID: "b1", Action: wecomsim.FaultSilence, Seconds: 60}); err != nil {
		t.Fatal(err)
	}
	q := c.post("alice", "missed, then delivered")
	if q.Delivered {
		t.Fatalf("delivered during the silence: %+v", q)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	missed := backfill.Message{MsgID: q.MsgID, Chat: "alice", ChatType: "single", UserID: "alice",
		Text: "missed, then delivered", Created: time.Now()}
	if err := n.node.Access.Late(ctx, "b1", missed); err != nil {
		t.Fatal(err)
	}
	// Taken, it is known under the id WeCom's own history gives it too: a
	// pass over that history does not answer it again.
	testwait.Eventually(t, waitLong, "known under its WeCom history id", func() bool {
		known, err := n.node.Access.Known(ctx, "b1", missed.HistoryID("b1"))
		return err == nil && known
	})
	testwait.Eventually(t, waitLong, "answered late", func() bool { return answeredLate(c.bot("alice"), "missed, then delivered") == 1 })
	testwait.Eventually(t, waitLong, "recorded delivered", func() bool { return c.record(n, q.MsgID).Delivery == task.Delivered })
	testwait.Eventually(t, waitLong, "alice idle", func() bool { return n.node.Pusher("b1").Idle("alice") })

	if err := c.sim.Fault(wecomsim.FaultRequest{BotID: "b1", Action: wecomsim.FaultClear}); err != nil {
		t.Fatal(err)
	}
	dups := n.node.Access.Stats().Duplicates
	if r := c.postAs(wecomsim.MessageRequest{UserID: "alice", MsgID: q.MsgID}); !r.Delivered {
		t.Fatalf("the redelivery was not delivered: %+v", r)
	}
	testwait.Eventually(t, waitLong, "the callback taken for a duplicate", func() bool { return n.node.Access.Stats().Duplicates == dups+1 })
	time.Sleep(time.Second) // a receipt would follow at once
	for _, e := range c.bot("alice") {
		if e.ReplyTo == q.MsgID {
			t.Fatalf("the redelivered callback got a reply: %+v", e)
		}
	}
	if s := n.node.Access.Stats(); s.EarlyReceipts != 0 {
		t.Fatalf("access stats %+v: an early receipt", s)
	}
}
