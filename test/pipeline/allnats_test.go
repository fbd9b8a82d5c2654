package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Every NATS server of an R3 cluster restarts at once while answers
// stream: the progress bucket (memory storage) comes back empty, the file
// streams (work queue, task and output buckets) keep what they held. The
// workers' next writes put the answers' text in progress back, the
// leader's pusher follows the bucket again and streams on, and every
// answer reaches its user complete, once, within WeCom's quota; no task
// stays behind in the queue.
func TestAllNATSServersRestartMidAnswer(t *testing.T) {
	t.Parallel() // mostly waiting on time windows (answers, quotas, TTLs): beside the other long tests
	natsc := testenv.NewNATSCluster(t, 3)
	for i := range 3 {
		natsc.Start(t, i)
	}
	c := newClusterWithoutNATS(t)
	// The ack wait production has: the fault is about the progress
	// bucket, not about a worker's in-progress acks lost during it.
	c.ackWait = 30 * time.Second
	const answerTime, paragraphs = 55 * time.Second, 12
	n := c.startOn("n1", strings.Join(natsc.URLs(), ","), func(cfg *config.Config) {
		cfg.NATS.Replicas = 3
		cfg.AI.Demo.AnswerTime = answerTime
		cfg.AI.Demo.Paragraphs = paragraphs
	})
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	c.sim.StartRecording()

	users := []string{"u0", "u1", "u2"}
	questions := map[string]string{}
	sent := map[string]wecomsim.MessageResult{}
	for i, u := range users {
		questions[u] = fmt.Sprintf("question %d across the restart", i)
		sent[u] = c.post(u, questions[u])
	}
	// Every answer is streaming: its user sees part of it.
	shown := map[string]int{}
	testwait.Eventually(t, waitLong, "every answer streaming", func() bool {
		for _, u := range users {
			e, ok := c.stream(u, sent[u].MsgID)
			if !ok || e.Finished || !strings.HasPrefix(e.Content, "You asked: ") {
				return false
			}
			shown[u] = len(e.Content)
		}
		return true
	})

	// Production's progress bucket has taken many writes when its
	// servers restart: its revisions then begin again far below the
	// pusher's watch (and watermark). Another bot's writes take this one
	// there.
	for i := range 300 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		raw := fmt.Sprintf(`{"task_id":"t_filler","bot":"other","text":"%d","attempt":1}`, i)
		if _, err := n.node.Store.Progress().Put(ctx, "t_filler", []byte(raw)); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	down := time.Now()
	for i := range 3 {
		natsc.Stop(t, i)
	}
	// Down long enough for the node to notice (its writes fail, its
	// connection reconnects).
	testwait.Eventually(t, waitLong, "a progress write failed", func() bool {
		v := value(scrape(t, n.api), "botctl_nats_errors_total", map[string]string{"kind": "request", "op": "output_write"})
		return v != nil && *v > 0
	})
	for i := range 3 {
		natsc.Start(t, i)
	}
	up := time.Now()
	// The node stops before the servers it uses: their cleanups, made
	// by the restart, would otherwise run first.
	t.Cleanup(n.stop)
	t.Logf("NATS down for %s", up.Sub(down).Round(time.Millisecond))
	// What the progress bucket holds once it answers (for the docs).
	testwait.Eventually(t, waitLong, "progress bucket answering", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := n.node.Store.Progress().Status(ctx)
		if err != nil {
			return false
		}
		if bs, ok := st.(*natsjs.KeyValueBucketStatus); ok {
			s := bs.StreamInfo().State
			t.Logf("progress bucket %s after the restart: %d values, sequences %d-%d", time.Since(up).Round(time.Millisecond), s.Msgs, s.FirstSeq, s.LastSeq)
		}
		return true
	})

	// The progress bucket takes writes again: each running answer's text
	// in progress is there, written after the restart.
	written := map[string]time.Time{} // each answer's first progress write seen after the restart
	for _, u := range users {
		id := task.ID("b1", sent[u].MsgID)
		testwait.Eventually(t, 2*waitLong, "text in progress of "+u+" written after the restart", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			o, err := task.GetOutput(ctx, n.node.Store.Progress(), id)
			if err == nil && o != nil && o.Updated.After(up) {
				written[u] = o.Updated
				t.Logf("%s: progress written %s after the restart", u, o.Updated.Sub(up).Round(time.Millisecond))
				return true
			}
			if r := c.record(n, sent[u].MsgID); r.Exec.Finished() {
				t.Fatalf("%s: the answer finished (%s) before any progress write after the restart", u, r.Exec)
			}
			return false
		})
	}
	// The user sees the answer grow after the restart: a progress frame
	// showing more than before the fault.
	testwait.Eventually(t, 2*waitLong, "progress frames after the restart", func() bool {
		for _, u := range users {
			if c.progressFrames(u, sent[u].MsgID, up, shown[u]) == 0 {
				return false
			}
		}
		return true
	})
	resumed := time.Since(up)

	for _, u := range users {
		want := ai.DemoAnswer(questions[u], paragraphs, 0)
		testwait.Eventually(t, 3*waitLong, "answer to "+u+" delivered", func() bool {
			return c.record(n, sent[u].MsgID).Delivery == task.Delivered
		})
		e, ok := c.stream(u, sent[u].MsgID)
		if !ok || !e.Finished || e.Content != want {
			s, _ := c.sim.Stats("b1")
			t.Fatalf("%s's stream shows %d bytes (finished %v), want the whole answer (%d bytes) finished; the bot's messages to %s: %s; record %+v; node %+v; simulator %+v",
				u, len(e.Content), e.Finished, len(want), u, c.summary(u), c.record(n, sent[u].MsgID), n.node.Node.Status(), s)
		}
		if r := c.record(n, sent[u].MsgID); r.Exec != task.Succeeded {
			t.Fatalf("%s: record %+v", u, r)
		}
	}
	// The answers streamed on after the restart: the pusher followed the
	// progress bucket again (its watch, begun again at the bucket's new
	// end), not only at each heartbeat or record refresh (20-30 s apart:
	// one frame at most in what was left of the answers).
	for _, u := range users {
		k := c.progressFrames(u, sent[u].MsgID, written[u], 0)
		if k < 3 {
			t.Errorf("%s saw %d progress frames with new text after the restart's first progress write, want 3 or more (one per progress gap)", u, k)
		}
		t.Logf("%s: %d progress frames with new text after the restart's first progress write", u, k)
	}
	// The pusher's watermark followed the bucket: not past its end.
	var wm pusher.Watermark
	var end uint64
	testwait.Eventually(t, waitLong, "the watermark within the progress bucket", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e, err := n.node.Store.Watermarks().Get(ctx, jetstream.BotKey("b1"))
		if err != nil || json.Unmarshal(e.Value(), &wm) != nil {
			return false
		}
		st, err := n.node.Store.Progress().Status(ctx)
		if err != nil {
			return false
		}
		end = st.(*natsjs.KeyValueBucketStatus).StreamInfo().State.LastSeq
		return wm.OutputRev <= end
	})
	t.Logf("watermark %d, progress bucket's last revision %d", wm.OutputRev, end)
	time.Sleep(time.Second) // a second copy would come now
	for _, u := range users {
		if bot := c.bot(u); len(bot) != 1 {
			t.Fatalf("%s sees %d messages from the bot, want the one answer: %+v", u, len(bot), bot)
		}
	}
	if s, _ := c.sim.Stats("b1"); s.QuotaRejections != 0 || s.ExpiredUpdates != 0 || s.FinishedStreamFrames != 0 {
		t.Fatalf("simulator refused frames: %+v", s)
	}
	testwait.Eventually(t, waitLong, "work queue empty", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		q, err := n.node.Store.QueuedConversations(ctx, "b1")
		return err == nil && len(q) == 0
	})
	if ids, err := n.node.Store.UndeliveredTasks(context.Background(), "b1"); err != nil || len(ids) != 0 {
		t.Fatalf("undelivered index after delivery: %v %v", ids, err)
	}
	t.Logf("progress frames resumed %s after the restart; all delivered %s after it",
		resumed.Round(time.Millisecond), time.Since(up).Round(time.Millisecond))
}

// summary lists the bot's messages in user's chat: kind, what each
// replies to, its length and whether it is finished (a failure's
// message; the texts themselves are long).
func (c *cluster) summary(user string) string {
	var b strings.Builder
	for _, m := range c.bot(user) {
		fmt.Fprintf(&b, "[%s to %s: %d bytes, finished %v] ", m.Kind, m.ReplyTo, len(m.Content), m.Finished)
	}
	return b.String()
}

// stream is the bot's stream answering msgid in user's chat.
func (c *cluster) stream(user, msgid string) (wecomsim.TranscriptEntry, bool) {
	for _, m := range c.bot(user) {
		if m.ReplyTo == msgid && m.Kind == "stream" {
			return m, true
		}
	}
	return wecomsim.TranscriptEntry{}, false
}

// progressFrames counts the frames of the stream answering msgid, not
// its last, accepted after since, each showing more than the one before,
// the first more than shown bytes (the simulator's recording).
func (c *cluster) progressFrames(user, msgid string, since time.Time, shown int) int {
	k := 0
	for _, e := range c.sim.Recorded("b1") {
		if e.Kind == wecomsim.RecordFrame && e.Chat == user && e.ReplyTo == msgid && !e.Finish &&
			e.At.After(since) && e.ContentLen > shown {
			k, shown = k+1, e.ContentLen
		}
	}
	return k
}
