package pusher

// A step's plan, apart from its effects: from what the step knows of its
// task (its record, its attempt's output, what this pusher showed and
// asked, the conversation's budget) and now, what to send next (a
// progress frame, the stream's close, the final frame, the answer's
// pushed parts) or nothing, and when the next step is due. The step
// (deliver.go) reads the record and the output, asks plan, and does what
// the plan says: sends, records, waits. Every function here reads no
// clock, does no I/O and changes nothing: its time is the now it is
// given, so each is tested as a table of single steps (plan_test.go).

import (
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
)

// sight is what a step knows of its task when it plans.
type sight struct {
	rec *task.Record
	// text is the attempt's output ("" when none is to be shown); view is
	// what a progress frame shows of it (thinking.go), viewHash its
	// task.Hash.
	text, view, viewHash string
	// version is when text was written (the worker's clock; zero: none);
	// watchedAt, when the output watch delivered that version (this
	// node's clock; zero: it was read, not watched).
	version, watchedAt time.Time
	// shownAt is when this pusher last showed the user something new;
	// flushAt, when it last asked the worker for its text (flush.go).
	shownAt, flushAt time.Time
	// room is how many sends the conversation's budget has left now.
	room int
	// acked is how many parts of the answer pushed from rec this pusher
	// saw acked (ledger.acked: more than rec.PushedParts when a count's
	// write failed).
	acked int
	// handingOver: this node hands the bot over (Handover).
	handingOver bool
}

// act is what a plan has the step do.
type act int

const (
	// actHold: nothing now; the next step after the move's wait.
	actHold act = iota
	// actAwaitAnswer: the record names an answer the output read is not
	// (yet): usually a replica of the output bucket a moment behind.
	actAwaitAnswer
	// actFrame: a progress frame with the move's content, spending the
	// budget above finalReserve.
	actFrame
	// actFlush: the frame's version is stale: ask the worker for its text
	// first and wait for it (the move's wait); a request that cannot be
	// made sends the frame now.
	actFlush
	// actClose: close the stream with the move's content (the content so
	// far and a note), unless the answer is written already (the step
	// reads it), then owe the answer by push (the move's why).
	actClose
	// actFinal: the final frame.
	actFinal
	// actHandoff: the stream cannot carry the answer: owe it by push (the
	// move's why).
	actHandoff
	// actRecount: write the count of the parts acked (the move's parts)
	// that the record lacks, then plan the push again (rules.owed).
	actRecount
	// actExpire: the answer was owed too long (the move's owedFor): its
	// delivery fails for good, nothing is sent.
	actExpire
	// actPush: push the answer's parts from the first the record does not
	// count.
	actPush
)

// move is a plan: what the step does, and with what.
type move struct {
	act act
	// wait: actHold, actAwaitAnswer, actFlush: until the next step.
	wait time.Duration
	// content: actFrame, actFlush and actClose: the frame's content.
	content string
	// changed: actFrame, actFlush: the frame shows new content, whose
	// task.Hash is hash (the record keeps it); else it is a heartbeat, its
	// content ending with the status line.
	changed bool
	hash    string
	// settled: actFrame: the frame's version was judged and is sent as it
	// is: a flush asked before is awaited no more (entry.flushing).
	settled bool
	// why: actClose, actHandoff: why the answer goes by push.
	why string
	// parts: actRecount: the parts acked.
	parts int
	// owedFor: actExpire: how long the answer was owed.
	owedFor time.Duration
}

// plan is what a step of s's task does at now.
func plan(ru rules, s sight, now time.Time) move {
	r := s.rec
	if r.Exec == task.Succeeded && r.AnswerHash != "" && task.Hash(s.text) != r.AnswerHash {
		return move{act: actAwaitAnswer, wait: answerWait}
	}
	switch ru.phaseOf(r, now, s.handingOver) {
	case progress:
		return ru.progress(s, now)
	case closing:
		return ru.closing(s)
	case final:
		return move{act: actFinal}
	case handoff:
		// Began under another term, never got a stream, or its window is
		// over: owed by push.
		return move{act: actHandoff, why: fmt.Sprintf("stream began under term %d, this is term %d", r.TermRev, ru.TermRev)}
	}
	return ru.parts(s, now)
}

// progress plans an open stream's step: its new content, or a heartbeat
// when nothing new came for a while, paced below the budget
// (progressWait). New content from a version that waited too long first
// asks the worker for its text now (stale), once per progress gap at
// most, and only while the budget has room for the frame anyway.
func (ru rules) progress(s sight, now time.Time) move {
	r := s.rec
	changed, heartbeat := ru.frameDue(r, s.view, s.viewHash, s.shownAt, now)
	if !changed && !heartbeat {
		return move{act: actHold, wait: min(ru.closeAt(r, now).Sub(now), ru.ScanInterval)}
	}
	if wait := ru.progressWait(r, now); wait > 0 {
		return move{act: actHold, wait: min(wait, ru.ScanInterval)}
	}
	mv := move{act: actFrame, content: Clip(s.view, wecom.MaxContentBytes-200, "…"), changed: changed}
	if !changed {
		mv.content = join(mv.content, ru.statusLine(r, now))
		return mv
	}
	mv.hash = s.viewHash
	if s.room > finalReserve {
		if stale(r, s.version, s.watchedAt, now) && now.Sub(s.flushAt) >= ru.Gap {
			mv.act, mv.wait = actFlush, flushWait
		} else {
			mv.settled = true
		}
	}
	return mv
}

// closing plans the stream's close: the content so far and the note, the
// handover's when this node hands the bot over.
func (ru rules) closing(s sight) move {
	why, note := "stream window closing", ru.TruncatedNote
	if s.handingOver {
		why, note = "handover: the leader stopped", ru.HandoverNote
	}
	return move{act: actClose, why: why, content: join(Clip(s.view, wecom.MaxContentBytes-len(note)-8, "…"), note)}
}

// parts plans a step of an answer owed by push: nothing before the
// execution is over; the count of parts acked but not recorded first.
func (ru rules) parts(s sight, now time.Time) move {
	r := s.rec
	if !r.Exec.Finished() {
		return move{act: actHold, wait: ru.ScanInterval}
	}
	if s.acked > r.PushedParts {
		// Acked, but the count's write failed: write it again; the part
		// is never sent twice by this pusher (ledger.partPushed).
		return move{act: actRecount, parts: s.acked}
	}
	return ru.owed(r, now)
}

// owed plans the push of r's answer, its parts counted: not sent late
// (replayExpired), else pushed.
func (ru rules) owed(r *task.Record, now time.Time) move {
	if owedFor, expired := ru.replayExpired(r, now); expired {
		return move{act: actExpire, owedFor: owedFor}
	}
	return move{act: actPush}
}

// wants decides from what is cached (the record as read at readAt, the
// output as last watched, in s) whether a step could have anything to do
// at now, so that thousands of quiet tasks cost no bucket reads: a record
// to read, the final frame or the push of an answer, the stream's close,
// or a progress frame's content or heartbeat (the same decisions as
// plan's).
func (ru rules) wants(s sight, readAt, now time.Time) bool {
	r := s.rec
	if r == nil || now.Sub(readAt) >= refreshEvery || r.Exec.Finished() {
		return true // a read, the final frame, or the push of the answer
	}
	switch ru.phaseOf(r, now, s.handingOver) {
	case progress:
		changed, heartbeat := ru.frameDue(r, s.view, s.viewHash, s.shownAt, now)
		return changed || heartbeat
	case closing:
		return true
	default:
		return false // push mode waits for the complete answer
	}
}

// stale: the version of r written at version is older than staleAfter
// by its stamp (the worker's clock) and, when the watch delivered it (at
// watchedAt), by its arrival (this node's): a worker's clock may be off
// by up to nats.max_clock_skew, and one behind must not make every frame
// ask. r must name the node running its attempt.
func stale(r *task.Record, version, watchedAt, now time.Time) bool {
	if r.Node == "" || version.IsZero() || now.Sub(version) < staleAfter {
		return false
	}
	return watchedAt.IsZero() || now.Sub(watchedAt) >= staleAfter
}

// retryIn is how long a task waits after a send that failed on its
// attempts'th try: a second, doubling, up to a minute.
func retryIn(attempts int) time.Duration {
	return min(time.Second<<min(attempts, 6), time.Minute)
}
