package worker

// The attempt's decisions: what becomes of a task's record and of its
// queue message when a step of one of its attempts ends, from what the
// attempt knows then. No store, no clock, no context: execute.go does
// what decide says.

import (
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/media"
	"github.com/botctl/botctl/pkg/task"
)

// step is a step of an attempt, in their order.
type step int

const (
	stepToken  step = iota // an AI concurrency token taken (acquire)
	stepStart              // the record says running under a new attempt (Lifecycle.Start)
	stepFiles              // the question's files copied for the backend
	stepAnswer             // the backend's answer streamed
	stepReply              // the reply's images and files stored
	stepStore              // the answer stored: the output's last write
	stepFinish             // the record says succeeded (Lifecycle.Finish)
)

var stepNames = [...]string{"token", "start", "files", "answer", "reply", "store", "finish"}

func (s step) String() string { return stepNames[s] }

// ending is what an attempt knows as one of its steps ends.
type ending struct {
	step step
	err  error // the step's error; nil: it went fine
	// stopped (stepAnswer) is why the run's context ended, if it did:
	// errCanceled, errSuperseded, errDeadline, or the node's own end.
	stopped error
	// nodeStopping: the worker's context ended (the node is stopping).
	nodeStopping bool
	// final: no other attempt follows if this one fails (the queue's
	// last delivery, or a fallback tier).
	final bool
	// offQueue: a fallback tier ran it; there is no queue message.
	offQueue bool
	// requeue (final, on the queue): the queue message may be requeued
	// with fresh deliveries (Store.Requeue; fewer than task.MaxRequeues
	// so far), so that a node stopping does not end the task.
	requeue bool
	// started and now (stepAnswer): when the task's first attempt
	// started (the record's Started), and when the answer's end was seen.
	// The execution deadline is limit after started.
	started, now time.Time
	limit        time.Duration // Config.Deadline
	backend      string        // the bot's backend, named in the reason
}

// recording is what an ending writes to the task's record.
type recording int

const (
	recordNothing recording = iota
	recordFail              // Lifecycle.Fail: queued again (retry) or failed for good
	recordGiveUp            // Lifecycle.GiveUp: failed for good, whatever the attempt
)

// verdict is what decide says of an ending.
type verdict struct {
	// goOn: the attempt carries on with its next step; nothing else is set.
	goOn bool
	// flush: the text so far is written as the attempt's last write
	// before the record, so it stays on the user's screen.
	flush  bool
	record recording
	retry  bool   // (recordFail) the record is queued again for another attempt
	why    string // (recordFail, recordGiveUp) the reason recorded: the user reads it
	steps  bool   // (recordFail) the backends the run asked go to the record too
	// res is what becomes of the queue message; for recordFail,
	// failOutcome says, once Fail has answered.
	res result
	// requeue (recordFail with retry): the queue message, on its last
	// delivery, is requeued with fresh deliveries rather than nak'd.
	requeue bool
	note    string // logged at info level, with the step's error
}

// tokenWhy is the reason recorded when the node stops while a task's last
// attempt waits for an AI concurrency token.
const tokenWhy = "the node stopped while the task waited for an AI concurrency token on its last delivery"

// decide says what an attempt does as step e.step ends.
func decide(e ending) verdict {
	if e.err == nil && e.step != stepAnswer {
		return verdict{goOn: true}
	}
	switch e.step {
	case stepToken: // only the node stopping ends the wait
		if !e.final {
			return verdict{res: result{action: actRetry, err: e.err}}
		}
		if e.requeue && !e.offQueue {
			return verdict{res: result{action: actRequeue, err: e.err}}
		}
		// No attempt follows: end the task rather than lock its conversation.
		act := actGiveUp
		if e.offQueue { // no queue message to terminate
			act = actAck
		}
		return verdict{record: recordGiveUp, why: tokenWhy, res: result{action: act, err: errors.New(tokenWhy)}}
	case stepStart:
		switch {
		case errors.Is(e.err, task.ErrFinished):
			return verdict{res: result{action: actAck}, note: "task already finished; skipping"}
		case errors.Is(e.err, task.ErrRunningOffQueue):
			return verdict{res: result{action: actHold, err: e.err}}
		}
		return verdict{res: result{action: actRetry, err: e.err}}
	case stepFiles:
		// Gone from the store (older than media.ttl, or deleted once the
		// task's delivery was final: an operator's retry): no retry brings
		// them back. Otherwise JetStream failed: another attempt may read them.
		retry := !errors.Is(e.err, media.ErrGone) && !e.final && !e.nodeStopping
		return fail("the files sent with the question could not be read: "+e.err.Error(), retry)
	case stepAnswer:
		return decideAnswer(e)
	case stepReply:
		return fail("reply not stored: "+e.err.Error(), !e.final)
	case stepStore:
		if errors.Is(e.err, task.ErrSuperseded) {
			return verdict{res: result{action: actLeave, err: e.err}}
		}
		return fail("answer not stored: "+e.err.Error(), !e.final)
	case stepFinish:
		switch {
		case errors.Is(e.err, task.ErrSuperseded):
			return verdict{res: result{action: actLeave, err: e.err}}
		case errors.Is(e.err, task.ErrFinished):
			return verdict{res: result{action: actAck}} // canceled or given up meanwhile: that stands
		}
		return verdict{res: result{action: actRetry, err: e.err}} // Finish may have been recorded: the next attempt finds out
	}
	panic(fmt.Sprintf("worker: decide: no step %d", e.step))
}

// decideAnswer is decide at the end of the backend's answer: a run
// stopped (canceled, taken over, past the deadline) ends as that says,
// whatever the backend returned; then the backend's error, if any.
func decideAnswer(e ending) verdict {
	switch {
	case errors.Is(e.stopped, errCanceled):
		// What came before the stop stays on the user's screen.
		return verdict{flush: true, res: result{action: actAck}, note: "task canceled"}
	case errors.Is(e.stopped, errSuperseded):
		return verdict{res: result{action: actLeave, err: task.ErrSuperseded}}
	case errors.Is(e.stopped, errDeadline) || !e.now.Before(e.started.Add(e.limit)):
		// Past the execution deadline, counted from the first attempt:
		// the run's context says so, or now does (the two agree but for
		// the context's timer's latency). The task is failed however many
		// attempts remain, and its conversation freed.
		why := fmt.Sprintf("execution deadline %s passed without an answer", e.limit)
		return verdict{flush: true, record: recordGiveUp, why: why, res: result{action: actGiveUp, err: errors.New(why)}}
	case e.err == nil:
		return verdict{goOn: true}
	case e.nodeStopping:
		// Off the queue the attempt is final only for this tier: the
		// spool's copy, forwarded to the queue, runs the task again (a
		// worker holding that copy runs it once this attempt has ended),
		// and the sweep ends it at the execution deadline if no copy
		// does. On the queue's last delivery the message is requeued
		// with fresh deliveries, a few times; past them nothing runs it
		// again.
		v := fail("interrupted: the node is stopping", true)
		switch {
		case e.final && !e.offQueue && e.requeue:
			v.requeue = true
		case e.final && !e.offQueue:
			v = fail("the node stopped during the task's last attempt", false)
		}
		v.flush = true
		return v
	}
	// A request the backend refused (ai.ErrBadRequest) fails the same way
	// again; a cut answer (ai.ErrCut: the backend failed after its first
	// token; the note is in the text) ends as it is. Neither is retried.
	settled := errors.Is(e.err, ai.ErrBadRequest) || errors.Is(e.err, ai.ErrCut)
	why := fmt.Sprintf("backend %s: %v", e.backend, e.err)
	if e.final && !settled {
		why = "last attempt failed: " + why
	}
	v := fail(why, !settled && !e.final)
	v.flush, v.steps = true, true
	return v
}

func fail(why string, retry bool) verdict {
	return verdict{record: recordFail, why: why, retry: retry}
}

// failOutcome is what becomes of the queue message once Fail answered
// err for an attempt's failure, why, recorded with retry.
func failOutcome(err error, retry bool, why string) result {
	switch {
	case errors.Is(err, task.ErrSuperseded):
		return result{action: actLeave, err: err}
	case errors.Is(err, task.ErrFinished):
		return result{action: actAck}
	case err != nil && retry:
		return result{action: actRetry, err: err}
	case err != nil:
		// Not recorded: let the queue deliver it again (or the sweep end it).
		return result{action: actRetry, err: fmt.Errorf("%s; and not recorded: %w", why, err)}
	case retry:
		return result{action: actRetry, err: errors.New(why)}
	}
	return result{action: actGiveUp, err: errors.New(why)}
}
