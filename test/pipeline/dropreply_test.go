package pipeline

// The network fails exactly as botctl sends the first reply to a message
// (the simulator's drop_on_reply fault): the frame is neither applied nor
// acked, the callback's req_id dies with the connection. What the user
// gets afterwards, on every path but the busy reply's
// (TestBusyReplyCutOffByTheNetworkArrivesLater).

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// answers counts the complete answers to question the user sees, however
// sent (the stream's final frame, or pushed, with a note or not).
func answers(entries []wecomsim.TranscriptEntry, question string) int {
	k := 0
	for _, e := range entries {
		if e.Finished && strings.Contains(e.Content, "You asked: "+question) && !cutShort(e) {
			k++
		}
	}
	return k
}

// dropOnReply arms drop_on_reply for msgid.
func (c *cluster) dropOnReply(msgid string) {
	c.t.Helper()
	if err := c.sim.Fault(wecomsim.FaultRequest{BotID: "b1", Action: wecomsim.FaultDropOnReply, MsgID: msgid}); err != nil {
		c.t.Fatal(err)
	}
}

// dropped is the frame drop_on_reply cut off, replying to msgid (the
// simulator records it when recording: c.sim.StartRecording).
func (c *cluster) dropped(msgid string) wecomsim.RecordedEvent {
	c.t.Helper()
	var d wecomsim.RecordedEvent
	testwait.Eventually(c.t, waitLong, "the cut-off frame recorded", func() bool {
		for _, e := range c.sim.Recorded("b1") {
			if e.Kind == wecomsim.RecordDropped && e.ReplyTo == msgid {
				d = e
				return true
			}
		}
		return false
	})
	return d
}

// drops is how many connections a fault dropped.
func (c *cluster) drops() int64 {
	s, _ := c.sim.Stats("b1")
	return s.Drops
}

// postWithID posts text from user under msgid and checks it was delivered.
func (c *cluster) postWithID(user, msgid, text string) {
	c.t.Helper()
	if r := c.postAs(wecomsim.MessageRequest{UserID: user, Text: text, MsgID: msgid}); !r.Delivered {
		c.t.Fatalf("%s not delivered: %+v", msgid, r)
	}
}

// answeredOnceAfterTheDrop checks what every case of a cut-off frame
// ends with: the connection dropped once and came back, question is
// answered exactly once (nothing more comes a while later), msgid's task
// is recorded delivered, no stream is left open, and WeCom's quota held.
// receiptShown: the receipt was applied before the drop, and its stream
// may stay at the receipt (nothing can finish it: its req_id died with
// the connection).
func (c *cluster) answeredOnceAfterTheDrop(n *runningNode, user, msgid, question string, receiptShown bool) {
	c.t.Helper()
	testwait.Eventually(c.t, waitLong, "the connection dropped as the frame was sent", func() bool { return c.drops() == 1 })
	testwait.Eventually(c.t, waitLong, "connected again", c.connected)
	testwait.Eventually(c.t, waitLong, "answered", func() bool { return answers(c.bot(user), question) >= 1 })
	testwait.Eventually(c.t, waitLong, "recorded delivered", func() bool { return c.record(n, msgid).Delivery == task.Delivered })
	time.Sleep(2 * time.Second) // a second answer would come now
	if k := answers(c.bot(user), question); k != 1 {
		c.t.Fatalf("answered %d times, want once: %+v", k, c.bot(user))
	}
	for _, e := range c.bot(user) {
		if !e.Finished && !(receiptShown && e.ReplyTo == msgid && strings.Contains(e.Content, "已收到")) {
			c.t.Fatalf("a stream left open: %+v", c.bot(user))
		}
	}
	if s, _ := c.sim.Stats("b1"); s.QuotaRejections != 0 || s.Drops != 1 {
		c.t.Fatalf("quota rejections %d, drops %d (want 0, 1)", s.QuotaRejections, s.Drops)
	}
}

// The receipt, a question's first reply, is the frame the network cuts
// off: whether it went early (arrive) or after the dispatch, the task
// runs, and its answer, which can no longer continue a stream the user
// never saw on a req_id that died with the connection, is pushed once the
// node is connected again: once, the record delivered, under the quota.
func TestReceiptCutOffByTheNetworkAnswerPushedOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		early bool
	}{{"early receipt", true}, {"receipt after the dispatch", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			n := c.start("n1", nil)
			testwait.Eventually(t, waitLong, "leader connected", c.connected)
			if tc.early {
				awaitFresh(t, c, n)
			}
			c.sim.StartRecording()
			const cut = "m-receipt-cut-off"
			c.dropOnReply(cut)
			c.postWithID("alice", cut, "is my answer lost?")
			c.answeredOnceAfterTheDrop(n, "alice", cut, "is my answer lost?", false)
			if d := c.dropped(cut); d.Finish || d.ContentHash != task.Hash(access.DefaultReceipt) {
				t.Fatalf("the cut-off frame %+v is not the receipt", d)
			}
			if s := n.node.Access.Stats(); (s.EarlyReceipts == 1) != tc.early || s.Dispatched != 1 {
				t.Fatalf("access stats %+v, want early receipt %v, one task", s, tc.early)
			}
			if r := c.record(n, cut); !r.StreamStart.IsZero() {
				t.Fatalf("the record carries a receipt the user never saw: %+v", r)
			}
		})
	}
}

// Two nodes: the leader's connection drops on the receipt. Whichever node
// holds the bot next (the leader reconnecting, or the standby taking
// over), the answer arrives once.
func TestReceiptCutOffOnTheLeaderOfTwoAnswerOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := c.start("a", nil)
	testwait.Eventually(t, waitLong, "a connected", c.connected)
	b := c.start("b", nil)
	c.sim.StartRecording()
	const cut = "m-leader-receipt-cut-off"
	c.dropOnReply(cut)
	c.postWithID("alice", cut, "and with a standby?")
	c.answeredOnceAfterTheDrop(a, "alice", cut, "and with a standby?", false)
	if d := c.dropped(cut); d.Finish || d.ContentHash != task.Hash(access.DefaultReceipt) {
		t.Fatalf("the cut-off frame %+v is not the receipt", d)
	}
	if r := c.record(b, cut); r.Delivery != task.Delivered || !r.StreamStart.IsZero() {
		t.Fatalf("the standby reads %+v", r)
	}
}

// The final frame, the first reply after the receipt, is cut off.
// drop_on_reply fires on the first reply to a message, which is always
// the receipt (a stream_unsupported chat still gets its receipt frame,
// refused only once applied, so it cannot move the fault past it).
// So acks come late (late_acks): the receipt is shown at once but its
// ack, which the req_id's next frame waits for, comes 3 s later; the
// fault is armed then, and the short answer, complete by the time the
// pusher has the req_id's turn, goes as the final frame: that is the
// frame that drops. The stream's req_id died with the connection: the
// answer is pushed, once (the stream stays at the receipt: nothing can
// finish it without its req_id).
func TestFinalFrameCutOffAnswerPushedOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) { cfg.AI.Demo.AnswerTime = 100 * time.Millisecond })
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	c.sim.StartRecording()
	if err := c.sim.Fault(wecomsim.FaultRequest{BotID: "b1", Action: wecomsim.FaultLateAcks, Seconds: 10, DelaySeconds: 3}); err != nil {
		t.Fatal(err)
	}
	const msgid = "m-final-cut-off"
	c.postWithID("alice", msgid, "and the final frame?")
	testwait.Eventually(t, waitLong, "receipt shown", func() bool {
		s, ok := c.stream("alice", msgid)
		return ok && strings.Contains(s.Content, "已收到")
	})
	c.dropOnReply(msgid)
	c.answeredOnceAfterTheDrop(n, "alice", msgid, "and the final frame?", true)
	if d := c.dropped(msgid); !d.Finish || d.ContentHash != c.record(n, msgid).AnswerHash {
		t.Fatalf("the cut-off frame %+v is not the answer's final frame: the test proves nothing", d)
	}
}

// A reply that needs no task (a command's, the allowlist's refusal) is
// the frame the network cuts off. It is not owed later (a late "/help"
// or refusal helps nobody: handling.go answered), but the message is
// marked handled (the seen bucket), so neither the gap backfill nor the
// health monitor takes it for missed; nothing is answered twice, and the
// conversation's next message is answered as usual.
func TestReplyWithoutTaskCutOffNotOwedButHandled(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) {
		c.withBackfill(cfg)
		cfg.Access.AllowUsers = []string{"alice"}
	})
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	c.sim.StartRecording()
	for i, tc := range []struct{ user, msgid, text string }{
		{"alice", "m-help-cut-off", "/help"},
		{"mallory", "m-refusal-cut-off", "let me in"},
	} {
		c.dropOnReply(tc.msgid)
		c.postWithID(tc.user, tc.msgid, tc.text)
		testwait.Eventually(t, waitLong, tc.text+": the connection dropped as its reply was sent", func() bool { return c.drops() == int64(i+1) })
		testwait.Eventually(t, waitLong, "connected again", c.connected)
		if d := c.dropped(tc.msgid); !d.Finish || d.StreamID != "r-"+task.ID("b1", tc.msgid) {
			t.Fatalf("the cut-off frame %+v is not %s's reply", d, tc.text)
		}
		testwait.Eventually(t, waitLong, tc.text+": marked handled", func() bool {
			seen, err := n.node.Store.Seen(context.Background(), "b1", tc.msgid)
			return err == nil && seen
		})
	}
	// The conversations go on: alice's next question is answered, and
	// mallory's next message refused, once each.
	next := c.post("alice", "after the help")
	testwait.Eventually(t, waitLong, "alice's next question answered", func() bool { return answers(c.bot("alice"), "after the help") == 1 })
	again := c.post("mallory", "let me in now")
	if got := c.replyTo("mallory", again.MsgID); !strings.Contains(got, "没有使用这个机器人的权限") {
		t.Fatalf("mallory's next message got %q", got)
	}
	time.Sleep(3 * time.Second) // a late reply to a cut-off message, or a second answer, would come now
	for _, user := range []string{"alice", "mallory"} {
		for _, e := range c.bot(user) {
			if e.ReplyTo == "m-help-cut-off" || e.ReplyTo == "m-refusal-cut-off" || strings.Contains(e.Content, "/stop") {
				t.Fatalf("a cut-off reply was sent later: %+v", c.bot(user))
			}
		}
	}
	if k := countReplies(c.bot("alice"), next.MsgID); k != 1 {
		t.Fatalf("alice's next question got %d replies: %+v", k, c.bot("alice"))
	}
	if k := countReplies(c.bot("mallory"), again.MsgID); k != 1 || len(c.bot("mallory")) != 1 {
		t.Fatalf("mallory sees %+v, want one refusal", c.bot("mallory"))
	}
	if s := n.node.Access.Stats(); s.Commands != 1 || s.Refused != 2 || s.Dispatched != 1 || s.Backfilled != 0 {
		t.Fatalf("access stats %+v", s)
	}
	if s, _ := c.sim.Stats("b1"); s.QuotaRejections != 0 {
		t.Fatalf("quota rejections %d", s.QuotaRejections)
	}
}

// An early receipt whose dispatch then finds the conversation busy: its
// stream is finished with the busy reply (earlyMissed), and the network
// cuts off the busy frame, or the early receipt itself. drop_on_reply
// fires on a message's first reply, the early receipt; to reach the busy
// frame, acks come late (late_acks), which holds the handling on the
// receipt's ack after the receipt is shown, and the fault is armed then:
// the busy frame is the next reply. Either way the refusal is owed
// (recorded by refuseLater, or sent by busy's own way) and the user gets
// it once the bot is connected again, once; nothing runs the refused
// question.
func TestEarlyReceiptsBusyFinishCutOffArrivesLater(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		busyFrame   bool // the busy frame is cut off (else the early receipt)
		earlyMissed int64
	}{{"the busy frame", true, 1}, {"the early receipt", false, -1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			earlyReceiptOfBusyCutOff(t, tc.busyFrame, tc.earlyMissed)
		})
	}
}

// earlyReceiptOfBusyCutOff is TestEarlyReceiptsBusyFinishCutOffArrivesLater's
// case; earlyMissed is the access stat wanted (-1: either).
func earlyReceiptOfBusyCutOff(t *testing.T, busyFrame bool, earlyMissed int64) {
	c := newCluster(t)
	n := busyUnannounced(t, c)
	c.sim.StartRecording()
	const msgid = "m-early-busy-cut-off"
	if busyFrame {
		if err := c.sim.Fault(wecomsim.FaultRequest{BotID: "b1", Action: wecomsim.FaultLateAcks, Seconds: 10, DelaySeconds: 3}); err != nil {
			t.Fatal(err)
		}
		c.postWithID("alice", msgid, "refused")
		testwait.Eventually(t, waitLong, "early receipt shown", func() bool {
			s, ok := c.stream("alice", msgid)
			return ok && strings.Contains(s.Content, "已收到")
		})
		c.dropOnReply(msgid)
	} else {
		c.dropOnReply(msgid)
		c.postWithID("alice", msgid, "refused")
	}
	testwait.Eventually(t, waitLong, "the connection dropped as the frame was sent", func() bool { return c.drops() == 1 })
	testwait.Eventually(t, waitLong, "connected again", c.connected)
	want, text := task.Hash(access.DefaultReceipt), "the early receipt"
	if busyFrame {
		want, text = task.Hash(access.DefaultBusy), "the early receipt's stream finished busy"
	}
	if d := c.dropped(msgid); d.ContentHash != want || d.Finish != busyFrame || d.StreamID != "s-"+task.ID("b1", msgid) {
		t.Fatalf("the cut-off frame %+v is not %s: the test proves nothing", d, text)
	}
	busy := func() int {
		k := 0
		for _, e := range c.bot("alice") {
			if e.Finished && strings.Contains(e.Content, "还在处理中") {
				k++
			}
		}
		return k
	}
	testwait.Eventually(t, waitLong, "the busy reply delivered after all", func() bool { return busy() > 0 })
	time.Sleep(2 * time.Second) // a second busy reply would come now
	if k := busy(); k != 1 {
		t.Fatalf("%d busy replies, want 1: %+v", k, c.bot("alice"))
	}
	if s := n.node.Access.Stats(); s.EarlyReceipts != 2 || s.Busy != 1 || earlyMissed >= 0 && s.EarlyMissed != earlyMissed {
		t.Fatalf("access stats %+v, want alice's early receipt refused busy", s)
	}
	if answers(c.bot("alice"), "refused") != 0 {
		t.Fatal("the refused question was answered")
	}
	if r := c.record(n, msgid); r.Exec == task.Running || r.Exec == task.Succeeded {
		t.Fatalf("the refused question ran: %+v", r)
	}
	if st, _ := c.sim.Stats("b1"); st.QuotaRejections != 0 {
		t.Fatalf("quota rejections %d", st.QuotaRejections)
	}
}
