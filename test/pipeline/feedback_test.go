package pipeline

import (
	"testing"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// The first stream frame of an answer carries feedback.id = its task's
// id; the user's thumbs down on it (WeCom's feedback_event) is recorded
// with the task and counted in /metrics by bot and kind.
func TestFeedbackRecordedWithItsTask(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", nil)
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	sent := c.post("alice", "rate me")
	testwait.Eventually(t, waitLong, "answered", func() bool { return answered(c.bot("alice"), "rate me") == 1 })
	id := task.ID("b1", sent.MsgID)
	bot := c.bot("alice")
	if len(bot) != 1 || bot[0].FeedbackID != id {
		t.Fatalf("the answer's stream carries feedback.id %q, want the task's id %s", bot[0].FeedbackID, id)
	}
	res, err := c.sim.PostEvent(wecomsim.EventRequest{BotID: "b1", UserID: "alice", EventType: wecom.EventFeedback,
		FeedbackID: id, FeedbackType: wecom.FeedbackInaccurate, FeedbackContent: "too short", InaccurateReasons: []int{2, 3}})
	if err != nil || !res.Delivered {
		t.Fatalf("feedback event: %+v, %v", res, err)
	}
	testwait.Eventually(t, waitLong, "feedback recorded with the task", func() bool { return c.record(n, sent.MsgID).Feedback != nil })
	fb := c.record(n, sent.MsgID).Feedback
	if fb.Kind != "inaccurate" || fb.Content != "too short" || len(fb.Reasons) != 2 || fb.User != "alice" || fb.Count != 1 {
		t.Fatalf("recorded %+v", fb)
	}
	// Counted once recorded (a duplicate is not): wait for it.
	testwait.Eventually(t, waitLong, "feedback counted", func() bool { return feedbackTotal(t, n, "inaccurate") == 1 })
	// The user takes it back: the latest verdict is kept, both counted.
	if _, err := c.sim.PostEvent(wecomsim.EventRequest{BotID: "b1", UserID: "alice", EventType: wecom.EventFeedback,
		FeedbackID: id, FeedbackType: wecom.FeedbackCanceled}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitLong, "second verdict recorded", func() bool {
		fb := c.record(n, sent.MsgID).Feedback
		return fb != nil && fb.Count == 2 && fb.Kind == "canceled"
	})
}

// A feedback_event delivered twice (WeCom sending it again: the same
// msgid, a new req_id) is recorded and counted once: the task record
// keeps the msgids it counted, the second delivery is a duplicate.
func TestFeedbackEventDeliveredTwiceCountedOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", nil)
	testwait.Eventually(t, waitLong, "leader connected", c.connected)
	sent := c.post("alice", "rate me twice")
	testwait.Eventually(t, waitLong, "answered", func() bool { return answered(c.bot("alice"), "rate me twice") == 1 })
	id := task.ID("b1", sent.MsgID)
	first, err := c.sim.PostEvent(wecomsim.EventRequest{BotID: "b1", UserID: "alice", EventType: wecom.EventFeedback,
		FeedbackID: id, FeedbackType: wecom.FeedbackAccurate})
	if err != nil || !first.Delivered {
		t.Fatalf("feedback event: %+v, %v", first, err)
	}
	testwait.Eventually(t, waitLong, "feedback recorded with the task", func() bool { return c.record(n, sent.MsgID).Feedback != nil })
	testwait.Eventually(t, waitLong, "feedback counted", func() bool { return feedbackTotal(t, n, "accurate") == 1 })
	dups := n.node.Access.Stats().Duplicates
	again, err := c.sim.PostEvent(wecomsim.EventRequest{BotID: "b1", MsgID: first.MsgID})
	if err != nil || !again.Delivered || again.MsgID != first.MsgID || again.ReqID == first.ReqID {
		t.Fatalf("the event delivered again: %+v, %v (first %+v)", again, err, first)
	}
	testwait.Eventually(t, waitLong, "the second delivery taken for a duplicate", func() bool { return n.node.Access.Stats().Duplicates > dups })
	if fb := c.record(n, sent.MsgID).Feedback; fb.Kind != "accurate" || fb.Count != 1 || len(fb.MsgIDs) != 1 || fb.MsgIDs[0] != first.MsgID {
		t.Fatalf("recorded %+v after the event twice, want it once", fb)
	}
	if v := feedbackTotal(t, n, "accurate"); v != 1 {
		t.Fatalf("botctl_feedback_total{bot=b1,kind=accurate} = %v after the event twice, want 1", v)
	}
}

// feedbackTotal is n's botctl_feedback_total of bot b1 and kind (0 when
// none was counted).
func feedbackTotal(t *testing.T, n *runningNode, kind string) float64 {
	t.Helper()
	if v := value(scrape(t, n.api), "botctl_feedback_total", map[string]string{"bot": "b1", "kind": kind}); v != nil {
		return *v
	}
	return 0
}
