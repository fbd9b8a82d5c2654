package pusher

// Where a task's delivery stands: the phases of its state machine and the
// decisions that place a task in one. A step (deliver.go) makes the move
// of its task's phase; the scan (needsStep) asks the same decisions of the
// cached record, so that the two never disagree.

import (
	"time"

	"github.com/botctl/botctl/pkg/task"
)

// phase is where a task's delivery stands at a step, found from its
// record and its attempt's output (phaseOf). Each step makes the move of
// one phase; what the move records in the task's record places the next
// step:
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

// phaseOf places r's delivery, text being its attempt's output ("" when
// none is to be shown).
func (p *Pusher) phaseOf(r *task.Record, text string, now time.Time) phase {
	switch {
	case !p.streamable(r, now):
		if r.Delivery == task.Pending || r.Delivery == task.Streaming {
			return handoff
		}
		return parts
	case r.Exec.Finished():
		return final
	case p.windowClosing(r, now), p.handingOver.Load():
		return closing
	}
	return progress
}

// streamable: the stream can still carry this answer on this connection.
func (p *Pusher) streamable(r *task.Record, now time.Time) bool {
	if r.TermRev != p.cfg.TermRev || r.ReqID == "" || r.StreamID == "" {
		return false
	}
	if r.Delivery != task.Pending && r.Delivery != task.Streaming {
		return false
	}
	return r.StreamStart.IsZero() || now.Before(r.StreamStart.Add(p.cfg.StreamWindow))
}

// closeAt is when r's stream must be closed: its window less the margin,
// from its first frame (from now for a stream not begun).
func (p *Pusher) closeAt(r *task.Record, now time.Time) time.Time {
	start := r.StreamStart
	if start.IsZero() {
		start = now
	}
	return start.Add(p.cfg.StreamWindow - p.cfg.Margin)
}

// windowClosing: r's stream is within Margin of its window's end and must
// be closed now. Never for a stream not begun (its window starts now).
func (p *Pusher) windowClosing(r *task.Record, now time.Time) bool {
	return !now.Before(p.closeAt(r, now))
}

// frameDue says what a progress frame would bring the user: changed, text
// (whose task.Hash is hash) is content not seen yet; heartbeat, nothing
// new has been shown for Heartbeat. Neither: no frame.
func (p *Pusher) frameDue(r *task.Record, text, hash string, shownAt, now time.Time) (changed, heartbeat bool) {
	return unseen(r, text, hash), p.heartbeatDue(r, shownAt, now)
}

// heartbeatDue: the user has seen nothing new for Heartbeat. shownAt is
// this pusher's last frame with new content; the record's PushedAt may
// be later (the inbound path's receipt, an earlier term).
func (p *Pusher) heartbeatDue(r *task.Record, shownAt, now time.Time) bool {
	if r.PushedAt.After(shownAt) {
		shownAt = r.PushedAt
	}
	return now.Sub(shownAt) >= p.cfg.Heartbeat
}

// unseen: text (whose task.Hash is hash) is content the user has not seen;
// empty text is nothing to show.
func unseen(r *task.Record, text, hash string) bool { return text != "" && hash != r.PushedHash }

// progressWait is how long r's next progress frame must still wait (0:
// none): progress is paced at ProgressGap below the budget, so that the
// final frame and the window's close always find room (progress alone
// could otherwise use the whole budget and make the final frame wait for
// the window). The final frame, when it comes, is not held up by this.
func (p *Pusher) progressWait(r *task.Record, now time.Time) time.Duration {
	gap := progressGap(p.cfg.Budget)
	if since := now.Sub(r.PushedAt); since < gap {
		return gap - since
	}
	return 0
}

// replayExpired: r's answer, owed by push, has been owed for ReplayExpiry
// since its execution ended (owedFor) and no part of it was sent: it is not
// sent late.
func (p *Pusher) replayExpired(r *task.Record, now time.Time) (owedFor time.Duration, expired bool) {
	done := r.ExecDone()
	if done.IsZero() || r.PushedParts != 0 {
		return 0, false
	}
	owedFor = now.Sub(done)
	return owedFor, owedFor > p.cfg.ReplayExpiry
}
