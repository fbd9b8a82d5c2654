package pipeline

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/config"
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
	c := newCluster(t)
	a := c.start("a", c.withBackfill)
	eventually(t, "a connected", c.connected)
	c.post("alice", "asked while all was well")
	eventually(t, "answered", func() bool { return answered(c.bot("alice"), "asked while all was well") == 1 })
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
		eventually(t, "recorded delivered", func() bool { return c.record(b, m.MsgID).Delivery == task.Delivered })
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
	c := newCluster(t)
	slow := func(cfg *config.Config) { c.withBackfill(cfg); cfg.AI.Demo.AnswerTime = 6 * time.Second }
	a := c.start("a", slow)
	eventually(t, "a connected", c.connected)
	first := c.post("alice", "the first question")
	eventually(t, "running", func() bool { return c.record(a, first.MsgID).Exec == task.Running })
	a.stop() // the first task goes back to the queue
	if r := c.post("alice", "asked while nobody listened"); r.Delivered {
		t.Fatalf("delivered with no connection: %+v", r)
	}
	c.start("b", slow)
	eventually(t, "first answered", func() bool {
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
