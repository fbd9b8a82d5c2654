package pipeline

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// A deploy loses nothing: the leader is stopped gracefully (SIGTERM) while
// users send 50 messages a second. Every message WeCom delivered to a
// connection is answered exactly once, whichever leader received it;
// messages WeCom could not deliver (no connection for a moment) are
// WeCom's to redeliver, not ours, and are not counted.
func TestGracefulStopUnderLoadLosesNothing(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	fast := func(cfg *config.Config) { cfg.AI.Demo.AnswerTime = 300 * time.Millisecond }
	a := c.start("a", fast)
	testwait.Eventually(t, waitLong, "a connected", c.connected)
	c.start("b", fast)

	const rate, total = 50, 200
	var (
		mu        sync.Mutex
		delivered []string // questions WeCom handed to a connection
		users     = map[string]string{}
	)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		for i := range total {
			<-tick.C
			user, q := fmt.Sprintf("u%03d", i), fmt.Sprintf("question %03d", i)
			r, err := c.sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: user, Text: q})
			if err != nil {
				t.Error(err)
				return
			}
			if r.Delivered {
				mu.Lock()
				delivered = append(delivered, q)
				users[q] = user
				mu.Unlock()
			}
		}
	})
	time.Sleep(total / 2 * time.Second / rate) // mid-flow
	a.stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(delivered) < total/2 {
		t.Fatalf("only %d of %d messages delivered by the simulator", len(delivered), total)
	}
	deadline := time.Now().Add(2 * waitLong)
	for _, q := range delivered {
		for answered(c.bot(users[q]), q) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%q (delivered by WeCom) never answered: the user sees %+v", q, c.bot(users[q]))
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
	time.Sleep(time.Second) // a duplicate would follow within moments
	for _, q := range delivered {
		if k := answered(c.bot(users[q]), q); k != 1 {
			t.Fatalf("%q answered %d times: %+v", q, k, c.bot(users[q]))
		}
	}
	s, _ := c.sim.Stats("b1")
	t.Logf("%d delivered of %d sent; simulator: %+v", len(delivered), total, s)
}

// WeCom stops acking for 30 s mid-traffic (the socket stays open): the
// connection is torn down after a few ack timeouts (1 s each here), the
// node's reconnects fail while the stall lasts (a subscribe unacked for
// its 10 s dial timeout), it reconnects once acks flow again, and every
// answer in flight is delivered, with no delivery attempt spent on what
// was the connection's fault.
func TestAckStallMidTrafficEveryAnswerDelivered(t *testing.T) {
	t.Parallel() // mostly waiting on time windows (answers, quotas, TTLs): beside the other long tests
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) {
		cfg.AI.Demo.AnswerTime = 3 * time.Second
		cfg.WeCom.AckTimeout = time.Second
	})
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	var sent []wecomsim.MessageResult
	for i := range 5 {
		sent = append(sent, c.post(fmt.Sprintf("u%d", i), fmt.Sprintf("question %d", i)))
	}
	if err := c.sim.Fault(wecomsim.FaultRequest{BotID: "b1", Action: "stall_acks", Seconds: 30}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * waitLong)
	for i, m := range sent {
		user, q := fmt.Sprintf("u%d", i), fmt.Sprintf("question %d", i)
		for answered(c.bot(user), q) == 0 || c.record(n, m.MsgID).Delivery != task.Delivered {
			if time.Now().After(deadline) {
				t.Fatalf("%q not delivered: user sees %+v; record %+v", q, c.bot(user), c.record(n, m.MsgID))
			}
			time.Sleep(50 * time.Millisecond)
		}
		if r := c.record(n, m.MsgID); r.PushAttempts != 0 {
			t.Errorf("%q: %d delivery attempts spent on a stalled connection", q, r.PushAttempts)
		}
	}
	// No answer twice: no final frame went into the stalled link (the
	// simulator applies what it does not ack), so none was pushed again.
	for i := range sent {
		user, q := fmt.Sprintf("u%d", i), fmt.Sprintf("question %d", i)
		if k := answered(c.bot(user), q); k != 1 {
			t.Errorf("%q answered %d times: %+v", q, k, c.bot(user))
		}
	}
	s, _ := c.sim.Stats("b1")
	if s.Connections < 2 {
		t.Fatalf("the stalled connection was not replaced: %+v", s)
	}
	t.Logf("simulator: connections %d, frames %v", s.Connections, s.Frames)
}

// A failover in the middle of 100 conversations' streams: the new leader
// finishes every answer (by push: the old connection's req_ids are gone),
// each exactly once, and WeCom never refuses a frame for the quota.
func TestFailoverMidStreamOf100Conversations(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	long := func(cfg *config.Config) { cfg.AI.Demo.AnswerTime = 8 * time.Second }
	a := c.start("a", long)
	testwait.Eventually(t, waitLong, "a connected", c.connected)
	c.start("b", long)
	const n = 100
	var sent []wecomsim.MessageResult
	for i := range n {
		sent = append(sent, c.post(fmt.Sprintf("u%03d", i), fmt.Sprintf("question %03d", i)))
	}
	testwait.Eventually(t, waitLong, "streams under way", func() bool {
		s, _ := c.sim.Stats("b1")
		return s.Frames["aibot_respond_msg"] >= 2*n // receipts and some progress
	})
	a.stop()
	deadline := time.Now().Add(3 * waitLong)
	for i := range sent {
		user, q := fmt.Sprintf("u%03d", i), fmt.Sprintf("question %03d", i)
		for answered(c.bot(user), q) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%q never answered after the failover: %+v", q, c.bot(user))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	time.Sleep(time.Second)
	for i := range sent {
		user, q := fmt.Sprintf("u%03d", i), fmt.Sprintf("question %03d", i)
		if k := answered(c.bot(user), q); k != 1 {
			t.Fatalf("%q answered %d times", q, k)
		}
	}
	if s, _ := c.sim.Stats("b1"); s.QuotaRejections != 0 {
		t.Fatalf("%d frames refused for the quota (45009)", s.QuotaRejections)
	}
}
