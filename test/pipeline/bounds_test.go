package pipeline

import (
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/worker"
)

// An answer longer than ai.max_answer_bytes reaches the user cut at the
// cap, with the truncation note at its end, once: one attempt, delivered.
func TestAnswerOverTheCapReachesTheUserTruncated(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) {
		cfg.AI.MaxAnswerBytes = 30_000
		cfg.AI.Demo.AnswerBytes = 300_000
		cfg.AI.Demo.AnswerTime = time.Second
	})
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	sent := c.post("alice", "tell me everything")
	testwait.Eventually(t, 2*waitLong, "delivered", func() bool { return c.record(n, sent.MsgID).Delivery == task.Delivered })
	r := c.record(n, sent.MsgID)
	if r.Exec != task.Succeeded || r.Attempt != 1 || r.AnswerBytes > 30_000+len(worker.DefaultTruncatedNote)+2 {
		t.Fatalf("record %s, attempt %d, answer %d bytes; want succeeded once, at most the cap and the note", r.Exec, r.Attempt, r.AnswerBytes)
	}
	// What the user read: the answer's parts, the last ending with the note.
	var seen strings.Builder
	notes := 0
	for _, m := range c.bot("alice") {
		notes += strings.Count(m.Content, worker.DefaultTruncatedNote)
		seen.WriteString(m.Content)
	}
	if notes != 1 || !strings.HasSuffix(strings.TrimSpace(seen.String()), worker.DefaultTruncatedNote) {
		t.Fatalf("the truncation note reached the user %d times (want once, at the end); user read %d bytes ending …%q", notes, seen.Len(), tail(seen.String(), 120))
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// startDuringOutage stops NATS, starts node n1 with mutate (it campaigns,
// connects and receives without JetStream, keeping tasks in its spool)
// and returns NATS's URL and the node, whose ready waits for it to bind
// JetStream after restartNATS.
func (c *cluster) startDuringOutage(mutate func(*config.Config)) (string, *launchedNode) {
	c.t.Helper()
	natsURL := c.nats.ClientURL()
	c.nats.Close()
	started := c.launchOn("n1", natsURL, mutate)
	testwait.Eventually(c.t, waitLong, "leader connected without NATS", c.connected)
	return natsURL, started
}

// The spool is bounded: while JetStream is away a node keeps at most
// spool.max_entries tasks, and the user of the next is told at once that
// the question cannot be taken now. A spooled task that waited longer
// than spool.expiry is not run when JetStream is back: its user, who was
// told "received", is told the message was not answered and to send it
// again.
func TestSpoolFullRefusesAndExpiredIsToldToResend(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	natsURL, started := c.startDuringOutage(func(cfg *config.Config) {
		cfg.Spool.MaxEntries = 1
		cfg.Spool.Expiry, cfg.Spool.LateAfter = time.Second, 500*time.Millisecond
	})
	first := c.post("alice", "asked during the outage")
	testwait.Eventually(t, waitLong, "receipt", func() bool {
		bot := c.bot("alice")
		return len(bot) > 0 && strings.Contains(bot[0].Content, "已收到")
	})
	refused := c.post("bob", "asked when the spool is full")
	if got := c.replyTo("bob", refused.MsgID); !strings.Contains(got, "暂时无法处理") {
		t.Fatalf("a message past the spool's bound got %q, want the reply that it cannot be taken now", got)
	}
	time.Sleep(2 * time.Second) // past spool.expiry: a precondition, not a measurement
	c.restartNATS(natsURL)
	n := started.ready(2 * waitLong) // bound JetStream after NATS came back
	var told string
	testwait.Eventually(t, waitLong, "alice told to resend", func() bool {
		for _, m := range c.bot("alice") {
			if m.Finished && strings.Contains(m.Content, "请重新发送") {
				told = m.Content
				return true
			}
		}
		return false
	})
	if !strings.Contains(told, "处理失败") || answered(c.bot("alice"), "asked during the outage") != 0 {
		t.Fatalf("alice read %q, want the note that it was not answered, and no answer", told)
	}
	r := c.record(n, first.MsgID)
	if r.Exec != task.Failed || r.Attempt != 0 || !strings.Contains(r.Error, "spool.expiry") {
		t.Fatalf("expired task's record: exec %s, attempt %d, error %q", r.Exec, r.Attempt, r.Error)
	}
	if r := c.record(n, refused.MsgID); r.ID != "" {
		t.Fatalf("the refused message became a task: %+v", r)
	}
}

// A task forwarded from the spool after waiting longer than
// spool.late_after is answered with the late note first.
func TestTaskForwardedLateFromTheSpoolSaysSo(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	natsURL, started := c.startDuringOutage(func(cfg *config.Config) { cfg.Spool.LateAfter = time.Second })
	c.post("alice", "asked during the outage")
	testwait.Eventually(t, waitLong, "receipt", func() bool { return len(c.bot("alice")) > 0 })
	time.Sleep(2 * time.Second) // past spool.late_after: a precondition
	c.restartNATS(natsURL)
	started.ready(2 * waitLong) // bound JetStream after NATS came back
	testwait.Eventually(t, waitLong, "answered late", func() bool { return answeredLate(c.bot("alice"), "asked during the outage") == 1 })
}
