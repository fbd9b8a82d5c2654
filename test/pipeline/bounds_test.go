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
