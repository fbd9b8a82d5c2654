package pipeline

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// lockWatch polls every conversation's queue message (the conversation's
// mutex) and keeps the oldest seen, its age on the server's clock.
type lockWatch struct {
	mu    sync.Mutex
	worst time.Duration
	what  string
}

func (w *lockWatch) run(ctx context.Context, store *jetstream.Store) {
	for ctx.Err() == nil {
		if q, err := store.ListQueue(ctx, "b1"); err == nil {
			for _, chat := range q.Conversations {
				msg, err := store.ConversationTask(ctx, "b1", chat)
				if err != nil || msg == nil {
					continue
				}
				if age := q.ServerTime.Sub(msg.Time); age > w.oldest() {
					w.mu.Lock()
					w.worst, w.what = age, fmt.Sprintf("%s (seq %d, %s)", chat, msg.Sequence, msg.Data)
					w.mu.Unlock()
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (w *lockWatch) oldest() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.worst
}

// The tasks bucket fails for 60 s under traffic (every request about it
// goes unanswered; the queue and every other bucket answer), so records
// never land: the leader's write fails, every worker's Start fails, the
// max-deliveries advisory cannot open them, /stop cannot read them. No
// conversation stays busy past its deadline plus the sweep interval,
// during the fault or after it; /stop frees a conversation whose task has
// no record; once the bucket answers, the endings owed are written and
// every conversation takes and answers a new question.
func TestTasksBucketFailingLocksNoConversation(t *testing.T) {
	t.Parallel() // mostly waiting on time windows (answers, quotas, TTLs): beside the other long tests
	const (
		deadline = 10 * time.Second
		sweep    = 2 * time.Second
		// slack: a round's own time (one timeout of the failing bucket, 5
		// s), twice (the round that just missed the message, and the next),
		// and a loaded machine's. Seen: 18 s.
		bound = deadline + sweep + 20*time.Second
		fault = 60 * time.Second
		users = 8
	)
	bucket := testenv.StartBucketFault(t)
	c := newCluster(t)
	c.sweep = sweep
	n := c.startOn("n1", bucket.URL, func(cfg *config.Config) { cfg.Worker.Deadline = deadline })
	testwait.Eventually(t, waitLong, "leader connected", c.connected)

	_, probe := bucket.Store(t, bucket.ProbeURL, jetstream.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var watch lockWatch
	wg.Go(func() { watch.run(ctx, probe) })

	user := func(i int) string { return fmt.Sprintf("u%d", i) }
	for i := range users {
		c.replyTo(user(i), c.post(user(i), "before the fault").MsgID)
	}

	bucket.Fail(t, n.node.Store.Names().TasksBucket)
	failed := time.Now()
	traffic, stopTraffic := context.WithCancel(ctx)
	for i := range users {
		wg.Go(func() {
			for k := 0; traffic.Err() == nil; k++ {
				if _, err := c.sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: user(i), Text: fmt.Sprintf("during the fault %d", k)}); err != nil && traffic.Err() == nil {
					t.Errorf("post: %v", err)
				}
				select {
				case <-traffic.Done():
				case <-time.After(3 * time.Second):
				}
			}
		})
	}
	// A user stops a task whose record never landed.
	const stopper = "stopper"
	c.post(stopper, "a question to stop")
	testwait.Eventually(t, waitLong, "the stopper's task queued", func() bool {
		m, err := probe.ConversationTask(ctx, "b1", stopper)
		return err == nil && m != nil
	})
	stop := c.postAs(wecomsim.MessageRequest{UserID: stopper, Text: "/stop"})

	time.Sleep(time.Until(failed.Add(fault))) // the fault's length is the point: no event ends it
	stopTraffic()
	bucket.Heal(t)
	held := func(when string) {
		t.Helper()
		if worst := watch.oldest(); worst > bound {
			watch.mu.Lock()
			defer watch.mu.Unlock()
			t.Fatalf("%s: a conversation stayed busy %s, past its deadline %s plus the sweep %s (and %s slack): %s",
				when, worst.Round(time.Second), deadline, sweep, bound-deadline-sweep, watch.what)
		}
	}
	t.Logf("oldest queue message seen during the fault: %s", watch.oldest().Round(time.Second))
	held("during the fault")
	testwait.Eventually(t, waitLong, "every conversation free", func() bool {
		q, err := probe.ListQueue(ctx, "b1")
		return err == nil && len(q.Conversations) == 0
	})
	held("after the fault")
	if got := c.replyTo(stopper, stop.MsgID); !strings.Contains(got, "已停止") {
		t.Fatalf("/stop of a task without a record: %q", got)
	}
	testwait.Eventually(t, waitLong, "the endings owed during the fault written", func() bool { return n.node.Lifecycle.Owed() == 0 })
	for _, u := range []string{user(0), user(users - 1), stopper} {
		c.post(u, "after the fault")
		testwait.Eventually(t, waitLong, u+" answered after the fault", func() bool { return answered(c.bot(u), "after the fault") == 1 })
	}
}
