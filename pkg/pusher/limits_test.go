package pusher_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// runUntil plays a worker writing ever-changing output for task id until
// enough holds, then the complete answer.
func (r *rig) runUntil(id, answer string, enough func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(waitLong)
	for i := 0; !enough(); i++ {
		if time.Now().After(deadline) {
			r.t.Fatalf("the running answer never got there: pusher %+v, sim %+v", r.p.Stats(), r.stats())
		}
		r.write(id, fmt.Sprintf("working… %d", i), false)
		time.Sleep(20 * time.Millisecond) // the worker's pace, not a wait for the pusher
	}
	r.write(id, answer, true)
}

// WeCom may drop a frame over the quota without a refusal (acked 0). A
// long answer's progress frames would pass the hour's cap — the
// simulator's scaled to 40 so the test runs in seconds, the budget's to 36
// — but the budget's hourly cap holds progress back, keeping the final
// frame's room: the user ends with the complete answer. Without the
// hourly cap the pusher sends on at its minute's rate, the simulator drops
// every frame past the 40th, the final one too, and the ack says nothing.
func TestSilentDropNeverLosesTheAnswer(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{QuotaMode: wecomsim.QuotaDrop, RateLimit: 1000, HourlyLimit: 40})
	r.budget = pace.New(600, time.Minute, nil).AndAtMost(36, time.Hour)
	r.start(pusher.Config{ScanInterval: 20 * time.Millisecond, Heartbeat: time.Hour})
	rec := r.ask("alice", "tell me everything")
	answer := "The whole answer, " + strings.Repeat("every word of it, ", 50) + "the end."
	r.runUntil(rec.ID, answer, func() bool {
		return r.p.Stats().Throttled >= 3 || r.stats().Frames[wecom.CmdRespondMsg] >= 45
	})
	r.waitDelivery(rec.ID, task.Delivered)
	bot := r.botMessages("alice")
	if len(bot) != 1 || bot[0].Content != answer || !bot[0].Finished {
		t.Fatalf("user sees %+v (sim %+v)", bot, r.stats())
	}
	if s := r.stats(); s.QuotaDrops != 0 {
		t.Fatalf("%d frames dropped silently: %+v", s.QuotaDrops, s)
	}
}

// A 45009 is not the task's failure: the pusher lowers the conversation's
// budget and sends again when it has room, and the answer arrives
// (MaxAttempts 2 would fail the delivery if refusals counted as attempts).
func TestQuotaRefusalLowersTheBudget(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{RateLimit: 5, RateWindow: 2 * time.Second})
	r.budget = pace.New(100, 2*time.Second, nil).AndAtMost(1000, time.Hour)
	r.start(pusher.Config{ScanInterval: 20 * time.Millisecond, Heartbeat: time.Hour, MaxAttempts: 2})
	rec := r.ask("alice", "hi")
	r.runUntil(rec.ID, "Hello, alice.", func() bool { return r.stats().QuotaRejections >= 2 })
	r.waitDelivery(rec.ID, task.Delivered)
	testwait.Eventually(t, waitLong, "the final frame shown", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content == "Hello, alice." && bot[0].Finished
	})
	if s := r.p.Stats(); s.QuotaRefused < 1 || s.Failed != 0 {
		t.Fatalf("pusher stats %+v", s)
	}
	if left := r.budget.Remaining("alice"); left > 50 {
		t.Fatalf("budget not lowered after 45009: %d sends left of 100", left)
	}
}

// 600039 (device type not supported) on a stream: that task's answer goes
// as a markdown push. The receipt already failed with it, as the inbound
// path would have seen, so the record has no stream begun.
func TestStreamUnsupportedFallsBackToPush(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	if err := r.sim.Fault(wecomsim.FaultRequest{BotID: "b", Action: wecomsim.FaultStreamUnsupported, Chat: "alice"}); err != nil {
		t.Fatal(err)
	}
	r.start(pusher.Config{MaxAttempts: 2})
	if _, err := r.sim.PostMessage(wecomsim.MessageRequest{BotID: "b", UserID: "alice", Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	in := <-r.msgs
	err := r.conn.ReplyStream(context.Background(), in.reqID, wecom.Stream{ID: "s-receipt", Content: "已收到"})
	if wecom.ErrCodeOf(err) != wecom.ErrCodeDeviceUnsupported {
		t.Fatalf("receipt: %v, want 600039", err)
	}
	rec := task.New("b", in.m.MsgID, time.Now())
	rec.ReqID, rec.TermRev, rec.Chat, rec.ChatType, rec.User, rec.Question = in.reqID, r.term, "alice", "single", "alice", "hi"
	rec.StreamID = "s-" + rec.ID
	if _, err := r.lc.Open(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	r.p.NotifyChat(rec.ID, "alice")
	r.write(rec.ID, "Hello, alice.", true)
	r.waitDelivery(rec.ID, task.Delivered)
	bot := r.botMessages("alice")
	if len(bot) != 1 || bot[0].Kind != wecom.MsgTypeMarkdown || !strings.Contains(bot[0].Content, "Hello, alice.") {
		t.Fatalf("user sees %+v", bot)
	}
}

// A huge answer (issue 26 item 6): more parts than the conversation may
// receive in one quota window. Every part reaches the user once, in order,
// labelled, none over the frame limit, none dropped by a simulator that
// drops what is over its quota without a word: the push waits for the
// budget between parts.
func TestHugeAnswerPushedWithinTheQuota(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{QuotaMode: wecomsim.QuotaDrop, RateLimit: 6, RateWindow: time.Second})
	r.budget = pace.New(5, time.Second, nil).AndAtMost(1000, time.Hour)
	r.start(pusher.Config{})
	rec := r.ask("alice", "everything, please")
	var paras []string
	for i := range 12 {
		paras = append(paras, fmt.Sprintf("part %d ", i)+strings.Repeat("字", 6000)) // 18 KB: one a part
	}
	full := strings.Join(paras, "\n\n")
	r.write(rec.ID, full, true)
	r.waitDelivery(rec.ID, task.Delivered)
	var got []string
	for _, m := range r.botMessages("alice") {
		if len(m.Content) > wecom.MaxContentBytes {
			t.Fatalf("a message of %d bytes", len(m.Content))
		}
		got = append(got, m.Content)
	}
	if len(got) != 12 || unlabel(t, got) != full {
		t.Fatalf("the user got %d messages, want the 12 parts once, in order (sim %+v)", len(got), r.stats())
	}
	if s := r.stats(); s.QuotaDrops != 0 || s.QuotaRejections != 0 {
		t.Fatalf("sim %+v", s)
	}
}
