package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/faultproxy"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// withBackfill points the gap backfill at the cluster's simulator.
func (c *cluster) withBackfill(cfg *config.Config) {
	cfg.Backfill.HistoryURL = "http" + strings.TrimPrefix(strings.TrimSuffix(c.wsURL, "/"), "ws")
}

// Messages sent while no node held the connection (WeCom could not
// deliver them and never will) are found by the next leader's gap
// backfill and answered by push, late and saying so, exactly once; what
// was handled before (an answer, a command) is not handled again.
func TestMissedMessagesAnsweredAfterRecovery(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := c.start("a", c.withBackfill)
	testwait.Eventually(t, waitLong, "a connected", c.connected)
	c.post("alice", "asked while all was well")
	testwait.Eventually(t, waitLong, "answered", func() bool { return answered(c.bot("alice"), "asked while all was well") == 1 })
	help := c.postAs(wecomsim.MessageRequest{UserID: "alice", Text: "/help"})
	if got := c.replyTo("alice", help.MsgID); !strings.Contains(got, "/stop") {
		t.Fatalf("/help: %q", got)
	}
	time.Sleep(3 * time.Second) // the inbound watermark is written every 2 s
	a.stop()

	var missed []wecomsim.MessageResult
	for i := range 3 {
		r := c.post(fmt.Sprintf("u%d", i), fmt.Sprintf("asked while nobody listened %d", i))
		if r.Delivered {
			t.Fatalf("the simulator delivered a message with no connection: %+v", r)
		}
		missed = append(missed, r)
	}
	b := c.start("b", c.withBackfill)
	for i, m := range missed {
		user, q := fmt.Sprintf("u%d", i), fmt.Sprintf("asked while nobody listened %d", i)
		deadline := time.Now().Add(waitLong)
		for answeredLate(c.bot(user), q) != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("%q never answered late: user sees %+v; record %+v; access %+v", q, c.bot(user), c.record(b, m.MsgID), b.node.Access.Stats())
			}
			time.Sleep(25 * time.Millisecond)
		}
		// The record follows the push's ack.
		testwait.Eventually(t, waitLong, "recorded delivered", func() bool { return c.record(b, m.MsgID).Delivery == task.Delivered })
		if r := c.record(b, m.MsgID); !r.Late {
			t.Fatalf("record of a missed message not marked late: %+v", r)
		}
	}
	time.Sleep(time.Second)
	if n := answered(c.bot("alice"), "asked while all was well"); n != 1 {
		t.Fatalf("an answered message was answered %d times after the backfill", n)
	}
	helps := 0
	for _, e := range c.bot("alice") {
		if strings.Contains(e.Content, "/stop") {
			helps++
		}
	}
	if helps != 1 {
		t.Fatalf("/help answered %d times", helps)
	}
	s := b.node.Access.Stats()
	if s.Backfilled != 3 {
		t.Fatalf("backfilled %d, want 3", s.Backfilled)
	}
}

// A message the leader received and receipted while NATS was out of its
// reach lives only in that node's spool. The node is lost with its disk
// before NATS comes back: the spool is never forwarded. The next leader's
// term-start backfill finds the message in the history (no task record,
// and it is past the watermark, which a spooled message holds back) and
// answers it late, once.
//
// The node is stopped, not killed (a node in this process cannot be), but
// with its NATS cut a stop forwards nothing either: the forwarder has no
// JetStream to publish to, and the spool's file is removed with the data
// dir before any node could start on it again.
func TestMessageOnlyInDeadNodesSpoolAnsweredByNextLeader(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	toNATS, err := faultproxy.New("127.0.0.1:0", strings.TrimPrefix(c.nats.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { toNATS.Close() })
	a := c.startOn("a", "nats://"+toNATS.Addr(), c.withBackfill)
	testwait.Eventually(t, waitLong, "a connected", c.connected)
	c.post("alice", "asked while all was well")
	testwait.Eventually(t, waitLong, "answered", func() bool { return answered(c.bot("alice"), "asked while all was well") == 1 })
	testwait.Eventually(t, waitLong, "inbound watermark written", func() bool {
		wm, err := backfill.LoadWatermark(context.Background(), a.node.Store, "b1")
		return err == nil && !wm.Created.IsZero()
	})

	toNATS.Close() // NATS is out of a's reach, and only a's
	const q = "held only in a's spool"
	sent := c.post("bob", q)
	if !sent.Delivered {
		t.Fatalf("the simulator did not deliver to the leader: %+v", sent)
	}
	testwait.Eventually(t, waitLong, "spooled", func() bool { return a.node.Dispatch.Stats().Spooled == 1 })
	// The receipt is the first frame of a stream that a never finishes.
	testwait.Eventually(t, waitLong, "receipted", func() bool {
		for _, m := range c.bot("bob") {
			if m.ReplyTo == sent.MsgID && strings.Contains(m.Content, "已收到") {
				return true
			}
		}
		return false
	})
	if depth, err := a.node.Spool.Len(); err != nil || depth != 1 {
		t.Fatalf("spool depth %d (%v), want 1", depth, err)
	}
	a.stop()
	if err := os.RemoveAll(filepath.Join(c.dir, "a")); err != nil {
		t.Fatal(err)
	}

	b := c.start("b", c.withBackfill)
	deadline := time.Now().Add(waitLong)
	for answeredLate(c.bot("bob"), q) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the spooled message was never answered: bob sees %+v; record %+v; access %+v",
				c.bot("bob"), c.record(b, sent.MsgID), b.node.Access.Stats())
		}
		time.Sleep(25 * time.Millisecond)
	}
	testwait.Eventually(t, waitLong, "recorded delivered", func() bool { return c.record(b, sent.MsgID).Delivery == task.Delivered })
	if r := c.record(b, sent.MsgID); !r.Late {
		t.Fatalf("record not marked late: %+v", r)
	}
	if n, k := answeredLate(c.bot("bob"), q), answered(c.bot("bob"), q); n != 1 || k != 0 {
		t.Fatalf("answered late %d times and on time %d times, want once late: %+v", n, k, c.bot("bob"))
	}
	if n := answered(c.bot("alice"), "asked while all was well"); n != 1 {
		t.Fatalf("a message handled before was answered %d times", n)
	}
	if s := b.node.Access.Stats(); s.Backfilled != 1 {
		t.Fatalf("backfilled %d, want 1", s.Backfilled)
	}
}

// answeredLate counts complete late answers to question (pushed, with the
// late note first).
func answeredLate(entries []wecomsim.TranscriptEntry, question string) int {
	k := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Content, "（抱歉，这条消息因系统故障未能及时回复") && strings.Contains(e.Content, "You asked: "+question) {
			k++
		}
	}
	return k
}

// A missed message whose conversation is still busy with an earlier task
// is not refused long after the fact: the backfill comes back to it and
// answers it once the conversation is free.
func TestMissedMessageOfBusyConversationAnsweredAfterIt(t *testing.T) {
	t.Parallel() // mostly waiting on time windows (answers, quotas, TTLs): beside the other long tests
	c := newCluster(t)
	slow := func(cfg *config.Config) { c.withBackfill(cfg); cfg.AI.Demo.AnswerTime = 6 * time.Second }
	a := c.start("a", slow)
	testwait.Eventually(t, waitLong, "a connected", c.connected)
	first := c.post("alice", "the first question")
	testwait.Eventually(t, waitLong, "running", func() bool { return c.record(a, first.MsgID).Exec == task.Running })
	a.stop() // the first task goes back to the queue
	if r := c.post("alice", "asked while nobody listened"); r.Delivered {
		t.Fatalf("delivered with no connection: %+v", r)
	}
	c.start("b", slow)
	testwait.Eventually(t, waitLong, "first answered", func() bool {
		return answered(c.bot("alice"), "the first question")+answeredLate(c.bot("alice"), "the first question") == 1
	})
	deadline := time.Now().Add(2 * waitLong)
	for answeredLate(c.bot("alice"), "asked while nobody listened") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the missed message was never answered: %+v", c.bot("alice"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
