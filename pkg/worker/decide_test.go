package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/media"
	"github.com/botctl/botctl/pkg/task"
	"github.com/nats-io/nats.go"
)

// seen is a verdict as a test compares it: the result's error by its text.
type seen struct {
	goOn, flush bool
	record      recording
	retry       bool
	why         string
	steps       bool
	requeue     bool
	action      action
	err         string
	note        string
}

func see(v verdict) seen {
	s := seen{goOn: v.goOn, flush: v.flush, record: v.record, retry: v.retry, why: v.why, steps: v.steps,
		requeue: v.requeue, action: v.res.action, note: v.note}
	if v.res.err != nil {
		s.err = v.res.err.Error()
	}
	return s
}

// The times of the answer's rows: the task's first attempt started at
// t0, its execution deadline 30 minutes later.
var (
	t0       = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	limit    = 30 * time.Minute
	deadline = t0.Add(limit)
)

// answerEnd is the answer's ending on delivery 2 of 5, seen at now.
func answerEnd(now time.Time, err error) ending {
	return ending{step: stepAnswer, err: err, started: t0, now: now, limit: limit, backend: "demo"}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	storeDown := fmt.Errorf("put: %w", nats.ErrNoResponders) // JetStream failing
	backendDown := fmt.Errorf("%w: 502", ai.ErrBackend)
	deadlineWhy := "execution deadline 30m0s passed without an answer"
	retryFail := func(why string) seen { return seen{record: recordFail, retry: true, why: why} }
	finalFail := func(why string) seen { return seen{record: recordFail, why: why} }
	final := func(e ending) ending { e.final = true; return e }
	stopping := func(e ending) ending { e.nodeStopping = true; return e }
	offQueue := func(e ending) ending { e.offQueue = true; return e }
	stopped := func(e ending, cause error) ending { e.stopped = cause; return e }
	requeuable := func(e ending) ending { e.requeue = true; return e }

	for _, c := range []struct {
		name string
		e    ending
		want seen
	}{
		// The token's wait ends only when the node stops.
		{"token taken", ending{step: stepToken}, seen{goOn: true}},
		{"token: node stopped, a delivery remains: handed back",
			ending{step: stepToken, err: context.Canceled}, seen{action: actRetry, err: "context canceled"}},
		{"token: node stopped on the last delivery: requeued with fresh deliveries",
			requeuable(final(ending{step: stepToken, err: context.Canceled})),
			seen{action: actRequeue, err: "context canceled"}},
		{"token: node stopped on the last delivery, requeued too often: given up, not left locking the conversation",
			final(ending{step: stepToken, err: context.Canceled}),
			seen{record: recordGiveUp, why: tokenWhy, action: actGiveUp, err: tokenWhy}},
		{"token: node stopped on a fallback tier: given up, no queue message",
			ending{step: stepToken, err: context.Canceled, final: true, offQueue: true},
			seen{record: recordGiveUp, why: tokenWhy, action: actAck, err: tokenWhy}},

		{"started", ending{step: stepStart}, seen{goOn: true}},
		{"start: the task finished meanwhile: skipped",
			ending{step: stepStart, err: fmt.Errorf("%w: canceled", task.ErrFinished)},
			seen{action: actAck, note: "task already finished; skipping"}},
		{"start: TestQueueCopyHeldWhileTaskRunsOffQueue: the attempt off the queue is alive: hold the copy",
			ending{step: stepStart, err: task.ErrRunningOffQueue},
			seen{action: actHold, err: task.ErrRunningOffQueue.Error()}},
		{"start: the tasks bucket did not answer for the whole patience: another delivery",
			ending{step: stepStart, err: storeDown}, seen{action: actRetry, err: storeDown.Error()}},

		{"files read", ending{step: stepFiles}, seen{goOn: true}},
		{"files: TestAttachmentsGoneFailTheTaskWithoutRetry: gone from the store: failed for good",
			ending{step: stepFiles, err: media.ErrGone},
			finalFail("the files sent with the question could not be read: " + media.ErrGone.Error())},
		{"files: JetStream failed: another attempt may read them",
			ending{step: stepFiles, err: storeDown},
			retryFail("the files sent with the question could not be read: " + storeDown.Error())},
		{"files: JetStream failed on the last delivery",
			final(ending{step: stepFiles, err: storeDown}),
			finalFail("the files sent with the question could not be read: " + storeDown.Error())},
		{"files: JetStream failed as the node stops: not queued again by this node",
			stopping(ending{step: stepFiles, err: storeDown}),
			finalFail("the files sent with the question could not be read: " + storeDown.Error())},

		// The answer, its deadline 30 minutes after the first attempt began.
		{"TestTaskRunsToOutputAndFreesConversation: answered before the deadline",
			answerEnd(deadline.Add(-time.Nanosecond), nil), seen{goOn: true}},
		{"answered as the node stops: the answer is in hand, stored",
			stopping(answerEnd(t0.Add(time.Minute), nil)), seen{goOn: true}},
		{"TestDeadlineFailsTheTask: answered at the deadline: given up",
			answerEnd(deadline, nil),
			seen{flush: true, record: recordGiveUp, why: deadlineWhy, action: actGiveUp, err: deadlineWhy}},
		{"TestDeadlineFailsTheTask: the run's deadline ended it: given up on an early delivery",
			stopped(answerEnd(deadline.Add(time.Millisecond), context.DeadlineExceeded), errDeadline),
			seen{flush: true, record: recordGiveUp, why: deadlineWhy, action: actGiveUp, err: deadlineWhy}},
		{"the run's deadline ended it with this node's clock behind: given up",
			stopped(answerEnd(deadline.Add(-time.Second), context.DeadlineExceeded), errDeadline),
			seen{flush: true, record: recordGiveUp, why: deadlineWhy, action: actGiveUp, err: deadlineWhy}},
		{"the deadline counts from the first attempt: a second attempt begun at 29m fails at 30m",
			answerEnd(t0.Add(30*time.Minute), backendDown),
			seen{flush: true, record: recordGiveUp, why: deadlineWhy, action: actGiveUp, err: deadlineWhy}},
		{"backend failed before the deadline: queued again, the text so far kept, the backends recorded",
			answerEnd(deadline.Add(-time.Nanosecond), backendDown),
			seen{flush: true, record: recordFail, retry: true, steps: true, why: "backend demo: " + backendDown.Error()}},
		{"TestFailingTaskGivenUpAfterMaxDeliver: backend failed on the last delivery",
			final(answerEnd(t0.Add(time.Minute), backendDown)),
			seen{flush: true, record: recordFail, steps: true, why: "last attempt failed: backend demo: " + backendDown.Error()}},
		{"TestBadRequestIsNotRetried: refused on an early delivery: failed for good",
			answerEnd(t0.Add(time.Minute), ai.ErrBadRequest),
			seen{flush: true, record: recordFail, steps: true, why: "backend demo: " + ai.ErrBadRequest.Error()}},
		{"refused on the last delivery: the reason is the backend's, not the last attempt's",
			final(answerEnd(t0.Add(time.Minute), ai.ErrBadRequest)),
			seen{flush: true, record: recordFail, steps: true, why: "backend demo: " + ai.ErrBadRequest.Error()}},
		{"TestCutAnswerEndsWithTheNote: cut after its first token: ends as it is",
			answerEnd(t0.Add(time.Minute), fmt.Errorf("%w: stream broke", ai.ErrCut)),
			seen{flush: true, record: recordFail, steps: true, why: "backend demo: " + ai.ErrCut.Error() + ": stream broke"}},
		{"TestStopCancels: canceled: acked, the text so far kept",
			stopped(answerEnd(t0.Add(time.Minute), context.Canceled), errCanceled),
			seen{flush: true, action: actAck, note: "task canceled"}},
		{"canceled past the deadline: the /stop stands",
			stopped(answerEnd(deadline.Add(time.Hour), context.Canceled), errCanceled),
			seen{flush: true, action: actAck, note: "task canceled"}},
		{"TestAttemptsAreFenced: taken over: the message is the later attempt's, nothing written",
			stopped(answerEnd(t0.Add(time.Minute), context.Canceled), errSuperseded),
			seen{action: actLeave, err: task.ErrSuperseded.Error()}},
		{"TestStopBeforeFinalDeliveryRequeues: interrupted by the node's stop: queued again",
			stopping(answerEnd(t0.Add(time.Minute), context.Canceled)),
			seen{flush: true, record: recordFail, retry: true, why: "interrupted: the node is stopping"}},
		{"TestStopOnFinalDeliveryRequeues: interrupted on the last delivery: queued again, the message requeued",
			requeuable(final(stopping(answerEnd(t0.Add(time.Minute), context.Canceled)))),
			seen{flush: true, record: recordFail, retry: true, requeue: true, why: "interrupted: the node is stopping"}},
		{"TestStopOnFinalDeliveryRequeuedTooOftenFailsAndFrees: interrupted on the last delivery, requeued too often: failed for good",
			final(stopping(answerEnd(t0.Add(time.Minute), context.Canceled))),
			seen{flush: true, record: recordFail, why: "the node stopped during the task's last attempt"}},
		{"interrupted on a fallback tier: left for the queue's copy of the task (the spool's), not failed",
			requeuable(offQueue(final(stopping(answerEnd(t0.Add(time.Minute), context.Canceled))))),
			seen{flush: true, record: recordFail, retry: true, why: "interrupted: the node is stopping"}},

		{"reply stored", ending{step: stepReply}, seen{goOn: true}},
		{"reply: the media store failed for the whole patience: queued again",
			ending{step: stepReply, err: storeDown}, retryFail("reply not stored: " + storeDown.Error())},
		{"reply: the media store failed on the last delivery",
			final(ending{step: stepReply, err: storeDown}), finalFail("reply not stored: " + storeDown.Error())},

		{"answer stored", ending{step: stepStore}, seen{goOn: true}},
		{"store: taken over: left to the later attempt",
			ending{step: stepStore, err: task.ErrSuperseded}, seen{action: actLeave, err: task.ErrSuperseded.Error()}},
		{"store: the output bucket failed for the whole patience: queued again",
			ending{step: stepStore, err: storeDown}, retryFail("answer not stored: " + storeDown.Error())},
		{"store: the output bucket failed on the last delivery",
			final(ending{step: stepStore, err: storeDown}), finalFail("answer not stored: " + storeDown.Error())},

		{"recorded succeeded", ending{step: stepFinish}, seen{goOn: true}},
		{"finish: taken over meanwhile: left to the later attempt",
			ending{step: stepFinish, err: task.ErrSuperseded}, seen{action: actLeave, err: task.ErrSuperseded.Error()}},
		{"finish: canceled or given up meanwhile: that stands",
			ending{step: stepFinish, err: fmt.Errorf("%w: canceled", task.ErrFinished)}, seen{action: actAck}},
		{"finish: the tasks bucket failed for the whole patience: another delivery finds out",
			ending{step: stepFinish, err: storeDown}, seen{action: actRetry, err: storeDown.Error()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := see(decide(c.e)); got != c.want {
				t.Fatalf("decide(%s step, err %v) =\n  %+v\nwant\n  %+v", c.e.step, c.e.err, got, c.want)
			}
		})
	}
}

// failOutcome: what becomes of the queue message once Fail has answered.
func TestFailOutcome(t *testing.T) {
	t.Parallel()
	why := "backend demo: 502"
	storeDown := fmt.Errorf("update: %w", nats.ErrNoResponders)
	for _, c := range []struct {
		name   string
		err    error
		retry  bool
		action action
		msg    string
	}{
		{"queued again", nil, true, actRetry, why},
		{"failed for good: the message terminated", nil, false, actGiveUp, why},
		{"taken over meanwhile: left to the later attempt", task.ErrSuperseded, false, actLeave, task.ErrSuperseded.Error()},
		{"finished meanwhile: acked", task.ErrFinished, true, actAck, ""},
		{"not recorded, to be queued again: redelivered", storeDown, true, actRetry, storeDown.Error()},
		{"not recorded, failed for good: redelivered (or the sweep ends it)", storeDown, false, actRetry,
			why + "; and not recorded: " + storeDown.Error()},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := failOutcome(c.err, c.retry, why)
			msg := ""
			if res.err != nil {
				msg = res.err.Error()
			}
			if res.action != c.action || msg != c.msg {
				t.Fatalf("failOutcome(%v, retry %v) = action %d %q, want %d %q", c.err, c.retry, res.action, msg, c.action, c.msg)
			}
			if c.err != nil && res.err != nil && !errors.Is(res.err, c.err) {
				t.Fatalf("failOutcome's error %v does not wrap Fail's %v", res.err, c.err)
			}
		})
	}
}
