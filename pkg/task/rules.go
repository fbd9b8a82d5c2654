package task

import (
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/clock"
)

// Rules are the lifecycle's changes of a record, pure: each returns the
// change one step makes to the record as read (what it refuses, with
// which error, and what it sets), for Lifecycle to apply under the
// bucket's compare-and-set and for any other keeper of records (an
// in-memory one in tests) to apply as it is. ErrNoChange: nothing to
// write. Node is the node writing; Clock its clock, read when the change
// is applied.
type Rules struct {
	Node  string
	Clock clock.PassiveClock
}

func (l *Lifecycle) rules() Rules { return Rules{Node: l.node, Clock: nowClock(l.now)} }

// nowClock is a clock read from a func (Lifecycle's, set by WithClock).
type nowClock func() time.Time

func (f nowClock) Now() time.Time                  { return f() }
func (f nowClock) Since(t time.Time) time.Duration { return f().Sub(t) }

// Merge is Open's change of a record that exists: the leader's fields of
// r (its req_id, stream, tier, term, the receipt sent, a card click's
// choice), nothing else.
func (s Rules) Merge(r *Record) func(*Record) error {
	return func(c *Record) error {
		changed := false
		set := func(dst *string, v string) {
			if v != "" && *dst != v {
				*dst, changed = v, true
			}
		}
		set(&c.ReqID, r.ReqID)
		set(&c.StreamID, r.StreamID)
		set(&c.Tier, r.Tier)
		set(&c.Incomplete, r.Incomplete)
		if r.TermRev != 0 && c.TermRev != r.TermRev {
			c.TermRev, changed = r.TermRev, true
		}
		if r.Late && !c.Late {
			c.Late, changed = true, true
		}
		if len(r.Attachments) > 0 && len(c.Attachments) == 0 {
			c.Attachments, changed = r.Attachments, true
		}
		if r.Click != nil && c.Click == nil {
			c.Click, changed = r.Click, true
		}
		if !r.StreamStart.IsZero() && c.Delivery == Pending {
			c.PushedHash, c.PushedAt, c.StreamStart = r.PushedHash, r.PushedAt, r.StreamStart
			for _, t := range r.RecentSends {
				c.Sent(t)
			}
			if err := c.SetDelivery(Streaming, "receipt sent", s.Node, s.Clock.Now().UTC()); err != nil {
				return err
			}
			changed = true
		}
		if !changed {
			return ErrNoChange
		}
		return nil
	}
}

// Start is Start's change: the record running under the next attempt,
// on tier, at the queue's delivery count deliveries (0: off the queue),
// whose number is left in attempt. A finished task is refused
// (ErrFinished); a running one is superseded, except by a queue delivery
// when an attempt other than seen (the one the caller found silent) runs
// off the queue (ErrRunningOffQueue). indexed: the undelivered index
// entry Open could not write was written since.
func (s Rules) Start(tier string, deliveries, seen int, indexed bool, attempt *int) func(*Record) error {
	return func(r *Record) error {
		if r.Exec.Finished() {
			return fmt.Errorf("%w: %s", ErrFinished, r.Exec)
		}
		if deliveries > 0 && runsOffQueue(r) && r.Attempt != seen {
			// Started off the queue since the caller's read: alive.
			return fmt.Errorf("%w: attempt %d on %s (tier %s)", ErrRunningOffQueue, r.Attempt, r.Node, r.Tier)
		}
		now := s.Clock.Now().UTC()
		why := fmt.Sprintf("attempt %d on %s (tier %s)", r.Attempt+1, s.Node, tier)
		if r.Exec == Running {
			why += fmt.Sprintf(", superseding attempt %d on %s", r.Attempt, r.Node)
		}
		if deliveries > 0 {
			why += fmt.Sprintf(", delivery %d", deliveries)
		}
		r.Attempt++
		*attempt = r.Attempt
		r.Node, r.Error, r.Deliveries = s.Node, "", deliveries
		if indexed {
			r.NotIndexed = false
		}
		if r.Tier == "" {
			r.Tier = tier
		}
		if r.Started.IsZero() {
			r.Started = now
		}
		return r.SetExec(Running, why, s.Node, now)
	}
}

// RunsOffQueue reports whether r's latest attempt runs on a fallback
// tier (a fixed worker's exec API, a leader's own worker), which holds no
// queue message.
func RunsOffQueue(r *Record) bool { return runsOffQueue(r) }

// Finish is Finish's change: attempt's answer text complete (fenced).
func (s Rules) Finish(attempt int, text string, steps []BackendStep) func(*Record) error {
	return func(r *Record) error {
		if err := fence(r, attempt); err != nil {
			return err
		}
		r.addBackends(attempt, steps)
		r.AnswerHash, r.AnswerBytes = Hash(text), len(text)
		return r.SetExec(Succeeded, fmt.Sprintf("answer complete, %d bytes", len(text)), s.Node, s.Clock.Now().UTC())
	}
}

// Fail is Fail's change: attempt failed (fenced), queued again with
// retry, failed for good without.
func (s Rules) Fail(attempt int, reason string, retry bool, steps []BackendStep) func(*Record) error {
	return func(r *Record) error {
		if err := fence(r, attempt); err != nil {
			return err
		}
		r.addBackends(attempt, steps)
		r.Error = reason
		if retry {
			return r.SetExec(Queued, fmt.Sprintf("attempt %d failed, will retry: %s", attempt, reason), s.Node, s.Clock.Now().UTC())
		}
		return r.SetExec(Failed, reason, s.Node, s.Clock.Now().UTC())
	}
}

// GiveUp is GiveUp's change: failed for good whatever its attempt; a
// finished task is left as it is.
func (s Rules) GiveUp(reason string) func(*Record) error {
	return func(r *Record) error {
		if r.Exec.Finished() {
			return ErrNoChange
		}
		r.Error = reason
		return r.SetExec(Failed, reason, s.Node, s.Clock.Now().UTC())
	}
}

// Refused is Refused's change of a record there is: failed as refused
// (busy: the answer is the busy reply), only while queued and never
// started.
func (s Rules) Refused(reason string, busy bool) func(*Record) error {
	return s.refused(reason, busy, "")
}

// RefusedSaying is RefusedSaying's change: Refused, its answer text.
func (s Rules) RefusedSaying(text string) func(*Record) error {
	return s.refused(text, false, text)
}

// refused is Refused's change, saying: the refusal's words for the user
// (RefusedSaying), or none.
func (s Rules) refused(reason string, busy bool, saying string) func(*Record) error {
	return func(r *Record) error {
		if r.Exec != Queued || r.Attempt > 0 {
			return ErrNoChange
		}
		r.Error, r.Busy, r.Refusal = reason, busy, saying
		return r.SetExec(Failed, reason, s.Node, s.Clock.Now().UTC())
	}
}

// Cancel is Cancel's change: canceled from any unfinished state
// (ErrFinished otherwise).
func (s Rules) Cancel(reason string) func(*Record) error {
	return func(r *Record) error {
		if r.Exec.Finished() {
			return fmt.Errorf("%w: %s", ErrFinished, r.Exec)
		}
		return r.SetExec(Canceled, reason, s.Node, s.Clock.Now().UTC())
	}
}

// Retry is Retry's change of the record: a finished task queued again
// for a new push (ErrNotFinished otherwise), its delivery reopened.
func (s Rules) Retry(id, reason string) func(*Record) error {
	return func(r *Record) error {
		if !r.Exec.Finished() {
			return fmt.Errorf("%w: task %s is %s", ErrNotFinished, id, r.Exec)
		}
		now := s.Clock.Now().UTC()
		r.ReqID, r.TermRev, r.StreamID, r.Error = "", 0, "", ""
		r.PushedParts, r.PushAttempts, r.PushedHash, r.FinalPending = 0, 0, "", false
		r.PushRound++ // a count still on its way from the old push is refused
		r.AnswerHash, r.AnswerBytes, r.Started = "", 0, time.Time{}
		if err := r.SetExec(Queued, reason, s.Node, now); err != nil {
			return err
		}
		if r.Delivery != Pending {
			return r.reopen(reason, s.Node, now)
		}
		return nil
	}
}

// RetryNotQueued is the change of a retried task whose queue message
// was not published: failed, saying why.
func (s Rules) RetryNotQueued(why string) func(*Record) error {
	return func(r *Record) error {
		r.Error = why
		return r.SetExec(Failed, why, s.Node, s.Clock.Now().UTC())
	}
}

// Redeliver is Redeliver's change: a finished task's delivery reopened
// for a new push (ErrNotFinished otherwise).
func (s Rules) Redeliver(id, reason string) func(*Record) error {
	return func(r *Record) error {
		if !r.Exec.Finished() {
			return fmt.Errorf("%w: task %s is %s", ErrNotFinished, id, r.Exec)
		}
		r.TermRev, r.ReqID, r.PushedParts, r.PushAttempts, r.FinalPending = 0, "", 0, 0, false
		r.PushRound++ // a count still on its way from the old push is refused
		return r.reopen(reason, s.Node, s.Clock.Now().UTC())
	}
}

// Shown is ShownFrom's change: frames the user now sees (oldest first),
// those not after PushedAt skipped; none left: ErrNoChange.
func (s Rules) Shown(frames []Frame) func(*Record) error {
	return func(r *Record) error {
		changed := false
		for _, f := range frames {
			if !f.At.After(r.PushedAt) {
				continue // recorded already
			}
			changed = true
			r.PushedAt = f.At
			r.Sent(f.At)
			if f.Hash != "" {
				r.PushedHash = f.Hash
			}
			if r.StreamStart.IsZero() {
				r.StreamStart = f.At
			}
			if r.Delivery == Pending {
				if err := r.SetDelivery(Streaming, "first frame sent", s.Node, f.At.UTC()); err != nil {
					return err
				}
			}
		}
		if !changed {
			return ErrNoChange
		}
		return nil
	}
}

// FinalIntent is FinalIntent's change: a final frame about to be sent.
func (s Rules) FinalIntent() func(*Record) error { return finalIntent }

// Truncate is Truncate's change: the stream closed before the answer was
// complete, owed by push. The closing frame is counted at the time of
// the call.
func (s Rules) Truncate(why string) func(*Record) error {
	now := s.Clock.Now()
	return func(r *Record) error {
		if r.Delivery == Truncated || r.Delivery.Finished() {
			return ErrNoChange
		}
		r.Sent(now) // the closing frame (counted even if it failed: the safe side)
		r.DeliveryReason = why
		return r.SetDelivery(Truncated, why, s.Node, s.Clock.Now().UTC())
	}
}

// PartPushed is PartPushed's change: n parts of the push begun from from
// acked, never fewer than counted; another push's: ErrPushSuperseded.
func (s Rules) PartPushed(from *Record, n int) func(*Record) error {
	now := s.Clock.Now()
	return func(r *Record) error {
		if r.Delivery.Finished() {
			return ErrNoChange // delivered meanwhile: the caller stops
		}
		if err := samePush(r, from); err != nil {
			return err
		}
		r.PushedParts, r.PushAttempts = max(r.PushedParts, n), 0
		r.Sent(now)
		return nil
	}
}

// Deliver is Delivered's change: the user has the ending text of the
// push begun from from (another push's: ErrPushSuperseded).
func (s Rules) Deliver(from *Record, text, why string, parts int) func(*Record) error {
	now := s.Clock.Now()
	return func(r *Record) error {
		if r.Delivery.Finished() {
			return ErrNoChange
		}
		if err := samePush(r, from); err != nil {
			return err
		}
		r.PushedHash, r.PushedAt, r.FinalPending, r.DeliveryReason = Hash(text), now, false, why
		r.Sent(now)
		if parts > 0 {
			r.PushedParts = parts
		}
		return r.SetDelivery(Delivered, why, s.Node, now.UTC())
	}
}

// SendFailed is SendFailed's change: one more failed send, the delivery
// failed for good at maxAttempts.
func (s Rules) SendFailed(sendErr error, maxAttempts int) func(*Record) error {
	return func(r *Record) error {
		if r.Delivery.Finished() {
			return ErrNoChange
		}
		r.PushAttempts++
		r.DeliveryReason = sendErr.Error()
		if r.PushAttempts >= maxAttempts {
			return r.SetDelivery(DeliveryFailed, fmt.Sprintf("gave up after %d attempts: %v", r.PushAttempts, sendErr), s.Node, s.Clock.Now().UTC())
		}
		return nil
	}
}

// Expired is Expired's change: the delivery failed, owed past the replay
// expiry.
func (s Rules) Expired(owedFor time.Duration) func(*Record) error {
	return func(r *Record) error {
		if r.Delivery.Finished() {
			return ErrNoChange
		}
		reason := fmt.Sprintf("%sthe answer was owed for %s, past the replay expiry", ExpiredPrefix, owedFor.Round(time.Second))
		r.DeliveryReason = reason
		return r.SetDelivery(DeliveryFailed, reason, s.Node, s.Clock.Now().UTC())
	}
}

// Feedback is Feedback's change: bot's user's verdict fb of event msgid
// counted once (counted: it was already, ErrNoChange).
func (s Rules) Feedback(bot, id, msgid string, fb Feedback, counted *bool) func(*Record) error {
	return func(r *Record) error {
		*counted = false
		if r.Bot != bot {
			return fmt.Errorf("feedback for task %s of bot %s, not of %s", id, r.Bot, bot)
		}
		next, ok := countFeedback(r.Feedback, msgid, fb)
		if !ok {
			*counted = true
			return ErrNoChange
		}
		r.Feedback = next
		return nil
	}
}

// Clone is a deep copy of r.
func (r *Record) Clone() *Record { return r.clone() }
