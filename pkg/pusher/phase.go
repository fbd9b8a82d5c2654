package pusher

// Where a task's delivery stands: the phases of its state machine and the
// decisions that place a task in one. A step (deliver.go) makes the move
// of its task's phase, as its plan says (plan.go); the scan (needsStep)
// asks the same decisions of the cached record (rules.wants), so that the
// two never disagree. Like the plan, every decision here is a pure
// function of the rules, the record and the now it is given.

import (
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/task"
)

// phase is where a task's delivery stands at a step, found from its
// record (rules.phaseOf). Each step makes the move of one phase; what the
// move records in the task's record places the next step:
//
//	progress ── window closing ───────────────────► closing ──► parts
//	progress ── execution over ───────────────────► final
//	final ───── acked (or applied earlier) ───────► done
//	final ───── too large: part 1 of n acked ─────► parts (from part 2)
//	final ───── refused, or outcome unknown ──────► parts
//	handoff (no stream here, still the stream's) ─► parts
//	parts ───── every part acked, or expired ─────► done
//
// done is not a phase a step finds but a step's result (step reports
// done): the delivery is recorded finished (delivered, or failed for
// good), and the task leaves the active set. A send that fails leaves the
// task in its phase (sendFailed) until MaxAttempts fails the delivery.
type phase int

const (
	// progress: the stream is open and the answer runs: a frame when
	// there is content the user has not seen or a heartbeat is due,
	// paced below the budget.
	progress phase = iota
	// closing: the stream's window is closing, or this node hands the bot
	// over (Handover): the stream is closed with the content so far and a
	// note, and the delivery is owed by push (truncated).
	closing
	// final: the execution is over: the final frame, delivered on its
	// ack; an answer too long for one frame is split (Parts), its first
	// part the final frame, the rest owed by push.
	final
	// handoff: the delivery is still the stream's (pending, streaming),
	// but the stream cannot carry it on this connection: it began under
	// another term (WeCom rejects an old connection's req_id), never got
	// a stream, or its window is over. The delivery is marked owed by
	// push (truncated).
	handoff
	// parts: owed by push: once the execution is over, the complete
	// answer is pushed as markdown, in parts, each recorded as it is
	// acked; an answer owed past ReplayExpiry is not sent late.
	parts
)

// rules are the settings the pusher's decisions read: a value taken from
// Config once (Config.rules), so that the decisions are pure functions of
// it, of what a step knows and of now.
type rules struct {
	// TermRev is this term's revision: a stream begun under another is
	// not continued here.
	TermRev int64
	// StreamWindow is WeCom's stream lifetime from the first frame;
	// Margin is how long before its end the stream is closed.
	StreamWindow, Margin time.Duration
	// Heartbeat: nothing new shown for this long, a frame with a status
	// line (HeartbeatLine, or QueuedLine while no worker has the task).
	Heartbeat                 time.Duration
	HeartbeatLine, QueuedLine string
	// TruncatedNote ends a stream closed at its window's end;
	// HandoverNote one closed by Handover.
	TruncatedNote, HandoverNote string
	// ScanInterval bounds a wait whose end nothing announces: the tick
	// looks again then anyway.
	ScanInterval time.Duration
	// Gap is the least time between two progress frames (progressGap of
	// the budget).
	Gap time.Duration
	// ReplayExpiry: an answer owed by push this long after its execution
	// ended is not sent late.
	ReplayExpiry time.Duration
}

// rules is what the decisions read of c (defaults set, Budget given).
func (c *Config) rules() rules {
	return rules{TermRev: c.TermRev, StreamWindow: c.StreamWindow, Margin: c.Margin,
		Heartbeat: c.Heartbeat, HeartbeatLine: c.HeartbeatLine, QueuedLine: c.QueuedLine,
		TruncatedNote: c.TruncatedNote, HandoverNote: c.HandoverNote,
		ScanInterval: c.ScanInterval, Gap: progressGap(c.Budget), ReplayExpiry: c.ReplayExpiry}
}

// phaseOf places r's delivery at now; handingOver: this node hands the
// bot over (Handover), and every stream still open is closed.
func (ru rules) phaseOf(r *task.Record, now time.Time, handingOver bool) phase {
	switch {
	case !ru.streamable(r, now):
		if r.Delivery == task.Pending || r.Delivery == task.Streaming {
			return handoff
		}
		return parts
	case r.Exec.Finished():
		return final
	case ru.windowClosing(r, now), handingOver:
		return closing
	}
	return progress
}

// streamable: the stream can still carry this answer on this connection.
func (ru rules) streamable(r *task.Record, now time.Time) bool {
	if r.TermRev != ru.TermRev || r.ReqID == "" || r.StreamID == "" {
		return false
	}
	if r.Delivery != task.Pending && r.Delivery != task.Streaming {
		return false
	}
	return r.StreamStart.IsZero() || ru.inWindow(r, now)
}

// inWindow: now is before the end of r's stream window, from its first
// frame.
func (ru rules) inWindow(r *task.Record, now time.Time) bool {
	return now.Before(r.StreamStart.Add(ru.StreamWindow))
}

// closeAt is when r's stream must be closed: its window less the margin,
// from its first frame (from now for a stream not begun).
func (ru rules) closeAt(r *task.Record, now time.Time) time.Time {
	start := r.StreamStart
	if start.IsZero() {
		start = now
	}
	return start.Add(ru.StreamWindow - ru.Margin)
}

// windowClosing: r's stream is within Margin of its window's end and must
// be closed now. Never for a stream not begun (its window starts now).
func (ru rules) windowClosing(r *task.Record, now time.Time) bool {
	return !now.Before(ru.closeAt(r, now))
}

// frameDue says what a progress frame would bring the user: changed, text
// (whose task.Hash is hash) is content not seen yet; heartbeat, nothing
// new has been shown for Heartbeat. Neither: no frame.
func (ru rules) frameDue(r *task.Record, text, hash string, shownAt, now time.Time) (changed, heartbeat bool) {
	return unseen(r, text, hash), ru.heartbeatDue(r, shownAt, now)
}

// heartbeatDue: the user has seen nothing new for Heartbeat. shownAt is
// this pusher's last frame with new content; the record's PushedAt may
// be later (the inbound path's receipt, an earlier term).
func (ru rules) heartbeatDue(r *task.Record, shownAt, now time.Time) bool {
	if r.PushedAt.After(shownAt) {
		shownAt = r.PushedAt
	}
	return now.Sub(shownAt) >= ru.Heartbeat
}

// unseen: text (whose task.Hash is hash) is content the user has not seen;
// empty text is nothing to show.
func unseen(r *task.Record, text, hash string) bool { return text != "" && hash != r.PushedHash }

// progressWait is how long r's next progress frame must still wait (0:
// none): progress is paced at the progress gap below the budget, so that
// the final frame and the window's close always find room (progress alone
// could otherwise use the whole budget and make the final frame wait for
// the window). The final frame, when it comes, is not held up by this.
func (ru rules) progressWait(r *task.Record, now time.Time) time.Duration {
	if since := now.Sub(r.PushedAt); since < ru.Gap {
		return ru.Gap - since
	}
	return 0
}

// statusLine ends a frame that shows nothing new: the time elapsed, and
// while the task waits for its first worker slot, that it is queued.
func (ru rules) statusLine(r *task.Record, now time.Time) string {
	el := now.Sub(r.Received)
	format := ru.HeartbeatLine
	if r.Exec == task.Queued && r.Attempt == 0 {
		format = ru.QueuedLine // every worker slot is busy: say so
	}
	return fmt.Sprintf(format, int(el.Minutes()), int(el.Seconds())%60)
}

// replayExpired: r's answer, owed by push, has been owed for ReplayExpiry
// since its execution ended (owedFor) and no part of it was sent: it is not
// sent late.
func (ru rules) replayExpired(r *task.Record, now time.Time) (owedFor time.Duration, expired bool) {
	done := r.ExecDone()
	if done.IsZero() || r.PushedParts != 0 {
		return 0, false
	}
	owedFor = now.Sub(done)
	return owedFor, owedFor > ru.ReplayExpiry
}
