package pipeline

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The balancer's move is a graceful handover under traffic: node a leads
// both bots, b starts, and the balancer hands one bot over to b while
// users write to both 20 times a second. Every message WeCom delivered to
// a connection is answered exactly once, the move is the bot's one
// handover and nothing was kicked.
func TestBalanceMoveUnderTrafficLosesNothing(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	if err := c.sim.AddBot("b2", "s2"); err != nil {
		t.Fatal(err)
	}
	bots := []string{"b1", "b2"}
	cfgOf := func(cfg *config.Config) {
		cfg.Bots = []config.Bot{{ID: "b1", Secret: "s1"}, {ID: "b2", Secret: "s2"}}
		cfg.AI.Demo.AnswerTime = 300 * time.Millisecond
		cfg.Election.Balance.Interval = time.Second
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	leader := func(bot string) string {
		l, err := election.Leader(context.Background(), cli, "", bot)
		if err != nil {
			return ""
		}
		return l.Node
	}
	a := c.start("a", cfgOf)
	testwait.Eventually(t, waitLong, "a leads both bots", func() bool { return leader("b1") == "a" && leader("b2") == "a" })

	var (
		mu        sync.Mutex
		delivered = map[string][]string{} // per bot, the questions WeCom handed to a connection
		msgIDs    = map[string]string{}   // question → its message id
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)
	wg.Go(func() {
		tick := time.NewTicker(time.Second / 20)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			bot := bots[i%2]
			q := fmt.Sprintf("question %04d", i)
			r, err := c.sim.PostMessage(wecomsim.MessageRequest{BotID: bot, UserID: fmt.Sprintf("u%04d", i), Text: q})
			if err != nil {
				t.Error(err)
				return
			}
			if r.Delivered {
				mu.Lock()
				delivered[bot] = append(delivered[bot], q)
				msgIDs[q] = r.MsgID
				mu.Unlock()
			}
		}
	})
	time.Sleep(2 * time.Second)
	c.start("b", cfgOf)
	testwait.Eventually(t, 2*time.Minute, "one bot moved to b", func() bool {
		return (leader("b1") == "b") != (leader("b2") == "b") && leader("b1") != "" && leader("b2") != ""
	})
	time.Sleep(3 * time.Second) // traffic on the moved bot's new leader
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	handovers := 0
	for _, bot := range bots {
		userOf := func(q string) string { return "u" + strings.TrimPrefix(q, "question ") }
		answers := func(q string) int { return answered(c.botOf(bot, userOf(q)), q) }
		deadline := time.Now().Add(2 * waitLong)
		for _, q := range delivered[bot] {
			for answers(q) == 0 {
				if time.Now().After(deadline) {
					rec, _, err := task.Get(context.Background(), a.node.Store.Tasks(), task.ID(bot, msgIDs[q]))
					t.Fatalf("%s: %q (delivered by WeCom) never answered: the user sees %+v; its task (%v): %+v", bot, q, c.botOf(bot, userOf(q)), err, rec)
				}
				time.Sleep(25 * time.Millisecond)
			}
		}
		time.Sleep(time.Second) // a duplicate would follow within moments
		for _, q := range delivered[bot] {
			if k := answers(q); k != 1 {
				t.Fatalf("%s: %q answered %d times", bot, q, k)
			}
		}
		if s, _ := c.sim.Stats(bot); s.Kicks != 0 {
			t.Fatalf("%s: %d kicks: the move overlapped two connections", bot, s.Kicks)
		}
		evs, err := node.LeaderEvents(context.Background(), cli, "/botctl/", bot, 50)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Event == "handover" {
				handovers++
			}
		}
		t.Logf("%s: %d messages delivered to a connection, each answered once", bot, len(delivered[bot]))
	}
	if handovers != 1 {
		t.Fatalf("%d balancer handovers, want 1", handovers)
	}
}

// botOf is what bot wrote in chat.
func (c *cluster) botOf(bot, chat string) []wecomsim.TranscriptEntry {
	var out []wecomsim.TranscriptEntry
	for _, m := range c.sim.Transcript(bot, chat) {
		if m.From == "bot" {
			out = append(out, m)
		}
	}
	return out
}
