package pusher

// Delivery: one step of one task, the move of its phase (phase.go): the
// stream frames and the pushes, and what each outcome records.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// finalReserve is how many sends of a conversation's budget per minute
// progress frames leave alone: the final frame and the window's close.
const finalReserve = 2

// ProgressGap is the least time between two progress frames of a stream
// at budget frames per minute: a minute spread over the budget less the
// reserve (serve writes a running answer's output about once per gap:
// its outputinterval.go).
func ProgressGap(budget int) time.Duration {
	return time.Minute / time.Duration(max(budget-finalReserve, 1))
}

// progressGap is ProgressGap for budget b: its first cap's window spread
// over its limit less the reserve.
func progressGap(b *pace.Budget) time.Duration {
	return b.Window() / time.Duration(max(b.Limit()-finalReserve, 1))
}

// StepTimeout bounds one step of one task: a few sends and record writes.
// A step that has begun runs to its end even when the term ends, and Run
// returns after the steps in flight: it is also how long the pusher may
// hold up a graceful stop (serve.GracefulStopBound).
const StepTimeout = 30 * time.Second

// ackOverdue: while the connection has owed an ack this long (or one timed
// out and nothing was acked since), no frame is sent (wecom.Conn.
// AcksOverdue). A frame sent into a stalled link has an unknown outcome,
// and every later frame of its req_id too; a final frame of unknown
// outcome is pushed again, which the user may see twice. Acks on a working
// link take milliseconds; holding costs a short delay at worst, and only
// the frames already in flight when acks stopped stay ambiguous.
const ackOverdue = 500 * time.Millisecond

// ReadTimeout bounds one read of a step (the task's record, its output):
// nats.go's own request timeout, which the step's deadline (StepTimeout)
// would otherwise replace. A read sent while the bucket's stream has no
// leader (every NATS server restarted at once, and they are still
// electing) is never answered; unbounded, it held the task's every step,
// its progress frames and its final frame, for the rest of StepTimeout:
// 30 s after the servers came back. Bounded, the step fails, and the next
// one, a second later, reads again.
const ReadTimeout = 5 * time.Second

// answerWait is how long a finished task waits for the output its record
// names to be readable.
const answerWait = 200 * time.Millisecond

// step moves one task forward; it reports whether the task is finished
// (delivered, failed, or not this bot's), and how long to wait before the
// next step.
func (p *Pusher) step(ctx context.Context, id string) (done bool, wait time.Duration) {
	// A step that has begun runs to its end even if the term is ending: a
	// frame in flight and the record of its outcome belong together. Sends
	// are bounded by the connection's ack timeout, and fail at once when
	// the connection closes (leadership lost).
	if p.cfg.Conn.AcksOverdue(ackOverdue) {
		p.count(func(s *Stats) { s.Stalled++ })
		return false, 250 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StepTimeout)
	defer cancel()
	rec, rev, done, wait := p.record(ctx, id)
	if rec == nil {
		return done, wait
	}
	// Only the text of the record's attempt counts: a superseded attempt's
	// output is never shown. Between two attempts (queued again) nothing
	// new is shown.
	text, view := "", ""  // view: text after the thinking's block, as a progress frame shows it
	var out *task.Output  // the attempt's output (nil: none to show)
	var version time.Time // when text was written
	var reply *task.Reply // the rich part of a succeeded answer (images, files, a card)
	// A queued one has none to show: it is not read.
	if rec.Exec != task.Queued {
		if o := p.output(ctx, rec); o != nil && o.Attempt == rec.Attempt {
			out, text, view, version = o, o.Text, p.view(o), o.Updated
			if rec.Exec == task.Succeeded {
				reply = out.Reply
			}
		}
	}
	now := p.cfg.Now()
	mv := plan(p.rules, p.sight(rec, text, view, version), now)
	switch mv.act {
	case actAwaitAnswer:
		// Usually a replica of the output bucket a moment behind (the read
		// is a direct get, answered by any replica): soon, not in a second.
		p.log.Debug().Str("task", id).Int("attempt", rec.Attempt).Msg("output differs from the recorded answer; waiting")
		return false, mv.wait
	case actHold:
		return false, mv.wait
	case actFrame, actFlush:
		done, wait = p.progress(ctx, rec, rev, mv, now)
	case actClose:
		done, wait = p.closeStream(ctx, rec, mv)
	case actFinal:
		done, wait = p.final(ctx, rec, rev, text, out, reply, now)
	case actHandoff:
		done, wait = p.toPush(ctx, rec, mv.why)
	default:
		done, wait = p.pushParts(ctx, rec, text, reply, mv, now)
	}
	if done {
		// Each phase is done only when the delivery is final.
		p.dropMedia(ctx, rec, reply)
	}
	return done, wait
}

// record is task id's record for a step, at revision rev: the cached one
// (cached), or a read. nil when there is none to deliver: done, the task
// is not this pusher's (another bot's, or delivered already: a stale
// entry of the undelivered index); else it cannot be read now, and the
// step is tried again after wait.
func (p *Pusher) record(ctx context.Context, id string) (rec *task.Record, rev uint64, done bool, wait time.Duration) {
	if rec, rev := p.cached(id); rec != nil {
		return rec, rev, false, 0
	}
	rctx, cancel := context.WithTimeout(ctx, ReadTimeout)
	defer cancel()
	rec, rev, err := task.Get(rctx, p.store.Tasks(), id)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		if p.missingTooLong(id) {
			// A notice (or an announcement) for an id with no record:
			// not stepped every second for ever. A real task comes back
			// when its record lands (its worker's notice, the index's
			// resync).
			p.log.Debug().Str("task", id).Dur("for", unknownRecordFor).Msg("no record for this task: dropped from the active set until one lands")
			return nil, 0, true, 0
		}
		return nil, 0, false, time.Second // the inbound path is still writing it
	}
	if errors.Is(err, schema.ErrNewer) {
		// A newer botctl's task: a leader of that version delivers it.
		// Out of the active set, as a corrupt record is.
		p.log.Warn().Err(err).Str("task", id).Msg("task left for a leader of a newer botctl")
		return nil, 0, true, 0
	}
	if errors.Is(err, task.ErrCorruptRecord) {
		// Out of the active set, not stepped again every second: the
		// resync brings it back once a minute while it stays corrupt.
		p.cfg.Lifecycle.Corrupt(p.cfg.Bot, id, task.CorruptAtPush, err)
		return nil, 0, true, 0
	}
	if err != nil {
		p.storeError("record_read", err)
		return nil, 0, false, time.Second
	}
	if rec.Bot != p.cfg.Bot {
		return nil, 0, true, 0
	}
	if rec.Delivery.Finished() {
		p.cfg.Lifecycle.Forget(ctx, rec.Bot, rec.ID) // a stale index entry
		return nil, 0, true, 0
	}
	if rec.Receiving() {
		// Its files are still being taken by the inbound path, which
		// answers it or announces it dispatched; nothing is sent on its
		// stream meanwhile (task/receiving.go).
		return nil, 0, false, receivingRecheck
	}
	return p.remember(id, rec, rev), rev, false, 0
}

// receivingRecheck is how often a task whose files are still being taken
// is read again (the inbound path's announcement steps it at once).
const receivingRecheck = 5 * time.Second

// unknownRecordFor is how long a task may have no record before the
// pusher stops stepping it (see record). Longer than the inbound path's
// record write takes; a var for tests.
var unknownRecordFor = time.Minute

// missingTooLong notes that a step found no record of id, and reports
// whether none has been found for unknownRecordFor.
func (p *Pusher) missingTooLong(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	en := p.active[id]
	if en == nil {
		return false
	}
	now := p.cfg.Now()
	if en.missing.IsZero() {
		en.missing = now
	}
	return now.Sub(en.missing) >= unknownRecordFor
}

// spend takes one send from the conversation's budget, leaving reserve
// sends to others (the final frame, the window's close); when it cannot,
// the step is throttled and waits until a send slot frees (wait).
func (p *Pusher) spend(chat string, reserve int) (wait time.Duration, ok bool) {
	wait, ok = p.cfg.Budget.Spend(chat, reserve)
	if !ok {
		p.count(func(s *Stats) { s.Throttled++ })
	}
	return wait, ok
}

// lag reports to Config.Metrics how long the output of task id last seen
// took to reach the user (acked at shown).
func (p *Pusher) lag(id string, shown time.Time) {
	if p.cfg.Metrics == nil {
		return
	}
	var updated time.Time
	p.mu.Lock()
	if en := p.active[id]; en != nil && en.out != nil {
		updated = en.out.Updated
	}
	p.mu.Unlock()
	if !updated.IsZero() && shown.After(updated) {
		p.cfg.Metrics.PushLag(p.cfg.Bot, shown.Sub(updated))
	}
}

// sight is what a step plans from: r, its attempt's output text (view:
// as a progress frame shows it) written at version, and what this pusher
// knows of the task and its conversation now.
func (p *Pusher) sight(r *task.Record, text, view string, version time.Time) sight {
	s := sight{rec: r, text: text, view: view, viewHash: task.Hash(view), version: version,
		handingOver: p.handingOver.Load()}
	p.mu.Lock()
	if en := p.active[r.ID]; en != nil {
		s.shownAt, s.flushAt = en.shownAt, en.flushAt
		if en.out != nil && en.out.Updated.Equal(version) {
			s.watchedAt = en.outAt
		}
	}
	p.mu.Unlock()
	s.acked, s.room = p.ledger.acked(r), p.cfg.Budget.Remaining(r.Chat)
	return s
}

// progress sends the progress frame mv plans (actFrame), or first asks
// the worker for its text when mv says its version is stale (actFlush).
func (p *Pusher) progress(ctx context.Context, r *task.Record, rev uint64, mv move, now time.Time) (bool, time.Duration) {
	if mv.act == actFlush && p.askFresh(r, now) {
		return false, mv.wait
	}
	if mv.settled {
		p.settled(r.ID)
	}
	if wait, ok := p.spend(r.Chat, finalReserve); !ok {
		return false, wait
	}
	err := p.cfg.Conn.ReplyStream(ctx, r.ReqID, wecom.Stream{ID: r.StreamID, Content: mv.content})
	if err != nil {
		if quotaRefused(err) {
			return p.quotaLowered(r, err)
		}
		if refused(err) {
			p.cfg.Budget.Refund(r.Chat)
		}
		if code := wecom.ErrCodeOf(err); refused(err) && streamGone(code) {
			return p.toPush(ctx, r, fmt.Sprintf("stream refused (errcode %d); pushing the answer", code))
		}
		return p.sendFailed(ctx, r, err)
	}
	p.count(func(s *Stats) { s.Frames++ })
	shownNow := p.cfg.Now()
	p.markShown(r.ID, shownNow)
	if mv.changed {
		p.lag(r.ID, shownNow)
	}
	if err := p.ledger.shown(ctx, r, rev, mv.hash, shownNow); err != nil {
		p.storeError("record_write", err)
		p.log.Warn().Err(err).Str("task", r.ID).Msg("record not updated after a frame")
	}
	return false, p.cfg.ScanInterval
}

func (p *Pusher) markShown(id string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if en := p.active[id]; en != nil {
		en.shownAt = at
	}
}

// final sends the final frame: never starved (reserve 0), delivered on
// its ack.
//
// An answer is sent as one sequence (task.Sequence): its text split in
// parts (Parts), its images, its card, its files. The final frame carries
// a prefix of it: the first part, and the images (msg_item) and the card
// (stream_with_template_card) when they fit in one frame (finalFrame).
// What it does not carry is owed by push from there
// (firstPartStreamed).
func (p *Pusher) final(ctx context.Context, r *task.Record, rev uint64, text string, out *task.Output, reply *task.Reply, now time.Time) (bool, time.Duration) {
	answer := p.finalText(r, text)
	parts := Parts(answer, wecom.MaxContentBytes)
	seq := task.Sequence(parts, reply)
	// The send first, then the images' reads: a conversation whose
	// budget is spent holds none of them in memory.
	if wait, ok := p.spend(r.Chat, 0); !ok {
		return false, wait
	}
	body, carried, err := p.finalFrame(ctx, r, p.finalWithThinking(out, parts[0], wecom.MaxContentBytes), seq, reply)
	if err != nil {
		p.cfg.Budget.Refund(r.Chat)
		p.storeError("media_read", err)
		p.log.Warn().Err(err).Str("task", r.ID).Msg("the reply's images could not be read; trying again")
		return false, time.Second
	}
	// From the step's read: one record write, no read, before the
	// frame (a read of an R3 bucket is a request to its leader).
	ir, irev, err := p.ledger.finalIntent(ctx, r, rev)
	if err != nil {
		p.storeError("record_write", err)
		p.cfg.Budget.Refund(r.Chat)
		return false, time.Second
	}
	if ir.Delivery.Finished() {
		// r was behind: the ending is delivered already (a notice
		// that came late, after the delivery). Nothing is sent twice.
		p.cfg.Budget.Refund(r.Chat)
		return true, 0
	}
	err = p.cfg.Conn.Reply(ctx, r.ReqID, body)
	switch code := wecom.ErrCodeOf(err); {
	case err == nil:
		p.count(func(s *Stats) { s.Frames++ })
		p.lag(r.ID, p.cfg.Now())
		if carried < len(seq) {
			return p.firstPartStreamed(ctx, ir, carried, len(seq))
		}
		_, err := p.ledger.deliveredFrom(ctx, ir, irev, answer, "final frame acked", 0)
		return p.recorded(r.ID, "final frame acked", 0, err)
	case errors.Is(err, wecom.ErrAckUnknown) && !errors.Is(err, wecom.ErrClosed):
		// No ack we can trust for this req_id (a timeout, or an
		// earlier frame's ack still owed): the final may or may not be
		// on the user's screen. Push the answer (its own req_id), so it
		// is there for sure; at worst the user sees it twice.
		p.count(func(s *Stats) { s.Ambiguous++ })
		return p.toPush(ctx, r, "final frame's outcome unknown (no trustworthy ack); pushing the answer")
	case code == wecom.ErrCodeStreamExpired && r.FinalPending && p.rules.inWindow(r, now):
		// An earlier final frame whose ack was lost was applied: the
		// stream is finished, not expired.
		p.count(func(s *Stats) { s.Ambiguous++ })
		if carried < len(seq) {
			return p.firstPartStreamed(ctx, r, carried, len(seq))
		}
		return p.delivered(ctx, r, answer, "final frame applied earlier (ack lost)", 0)
	case quotaRefused(err):
		return p.quotaLowered(r, err)
	case streamGone(code):
		p.cfg.Budget.Refund(r.Chat)
		return p.toPush(ctx, r, fmt.Sprintf("stream refused (errcode %d); pushing the answer", code))
	default:
		return p.sendFailed(ctx, r, err)
	}
}

// firstPartStreamed records that r's stream ended with the first carried
// of the n items of its answer's sequence: the delivery is owed by push
// (truncated), from the next. Were the count's write lost, the next step
// pushes from the first (an item seen twice, never one missing).
func (p *Pusher) firstPartStreamed(ctx context.Context, r *task.Record, carried, n int) (bool, time.Duration) {
	rec, err := p.ledger.truncate(ctx, r.ID, fmt.Sprintf("answer larger than one frame: %d of its %d parts streamed, the rest pushed", carried, n))
	if err != nil {
		p.storeError("record_write", err)
		return false, time.Second
	}
	if _, err := p.ledger.partPushed(ctx, rec, carried); err != nil {
		return p.partNotRecorded(rec, carried, err)
	}
	return false, 0
}

// streamGone: WeCom refused a stream frame because the stream cannot be
// written any more (an old connection's req_id, or its window over) or
// cannot be shown at all (600039: the user's device does not support
// streams): the answer goes by markdown push.
func streamGone(code int) bool {
	return code == wecom.ErrCodeInvalidReqID || code == wecom.ErrCodeStreamExpired || code == wecom.ErrCodeDeviceUnsupported
}

// quotaRefused: WeCom refused a send for the conversation's quota (45009).
func quotaRefused(err error) bool {
	return refused(err) && wecom.ErrCodeOf(err) == wecom.ErrCodeRateLimited
}

// quotaLowered ends a step whose send WeCom refused for the
// conversation's quota (45009): WeCom counted more sends than the budget
// did. The send stays counted, the budget lowers the conversation's rate
// (pace.Budget.Refused), and the step waits for the conversation's next
// slot. Not an attempt of the task's: the answer is fine, the
// conversation is busy; a refusal is never what keeps botctl under the
// quota (WeCom may drop a frame over it without one), the budget is.
func (p *Pusher) quotaLowered(r *task.Record, err error) (bool, time.Duration) {
	p.cfg.Budget.Refused(r.Chat)
	p.count(func(s *Stats) { s.Errors++; s.QuotaRefused++ })
	wait := max(p.cfg.Budget.Free(r.Chat).Sub(p.cfg.Now()), p.cfg.ScanInterval)
	p.log.Warn().Err(err).Str("task", r.ID).Str("chat", r.Chat).Dur("retry_in", wait).Msg("WeCom refused a send for the conversation's quota; its budget is lowered")
	return false, wait
}

// closeStream ends the stream with mv's content (the content so far and
// a note); the full answer follows by push.
func (p *Pusher) closeStream(ctx context.Context, r *task.Record, mv move) (bool, time.Duration) {
	if p.answerWritten(ctx, r) {
		// Complete, its record not written yet (a worker between its
		// last write and Finish): closing the stream with it and the
		// note, then pushing it, would show the whole answer twice. Its
		// final frame follows once the record says so (after a handover,
		// the next leader's push).
		return false, answerWait
	}
	if wait, ok := p.spend(r.Chat, 0); !ok {
		return false, wait
	}
	err := p.cfg.Conn.ReplyStream(ctx, r.ReqID, wecom.Stream{ID: r.StreamID, Content: mv.content, Finish: true})
	if err == nil {
		p.count(func(s *Stats) { s.Frames++; s.Truncated++ })
	} else {
		if quotaRefused(err) {
			p.cfg.Budget.Refused(r.Chat)
		} else {
			p.cfg.Budget.Refund(r.Chat)
		}
		p.log.Info().Err(err).Str("task", r.ID).Msg("closing the stream failed; the answer goes by push anyway")
	}
	return p.toPush(ctx, r, mv.why)
}

// answerWritten: r's attempt has written its last output (the complete
// answer, in the output bucket) though r does not say it finished yet.
// A read that fails says no: the stream is closed as when it is running.
func (p *Pusher) answerWritten(ctx context.Context, r *task.Record) bool {
	rctx, cancel := context.WithTimeout(ctx, ReadTimeout)
	defer cancel()
	o, err := task.GetOutput(rctx, p.store.Output(), r.ID)
	return err == nil && o != nil && o.Attempt == r.Attempt
}

// toPush marks the delivery truncated: the complete answer is owed by push.
func (p *Pusher) toPush(ctx context.Context, r *task.Record, why string) (bool, time.Duration) {
	if _, err := p.ledger.truncate(ctx, r.ID, why); err != nil {
		p.storeError("record_write", err)
		return false, time.Second
	}
	return false, 0
}

// pushParts delivers the complete answer by aibot_send_msg, as mv
// plans: from the first part not yet recorded pushed, its count written
// first when this pusher saw more parts acked (actRecount); or not at all
// when it was owed too long (actExpire).
func (p *Pusher) pushParts(ctx context.Context, r *task.Record, text string, reply *task.Reply, mv move, now time.Time) (bool, time.Duration) {
	if mv.act == actRecount {
		rec, err := p.ledger.partPushed(ctx, r, mv.parts)
		if err != nil {
			return p.partNotRecorded(r, mv.parts, err)
		}
		r, mv = rec, p.rules.owed(rec, now)
	}
	if mv.act == actExpire {
		owedFor := mv.owedFor
		rec, err := p.ledger.expired(ctx, r.ID, owedFor)
		if err != nil {
			return false, time.Second
		}
		p.count(func(s *Stats) { s.Failed++ })
		p.log.Error().Str("task", r.ID).Dur("owed_for", owedFor).Msg("answer owed past the replay expiry: not sent late; delivery failed")
		if p.cfg.Health != nil && rec.Delivery == task.DeliveryFailed {
			p.cfg.Health.DeliveryFailed(rec, errors.New(rec.DeliveryReason))
		}
		return true, 0
	}
	answer := p.finalText(r, text)
	if text == "" && (r.Exec == task.Failed || r.Exec == task.Canceled) {
		// A proactive message neither replies to the question nor, with
		// no answer in it, says which question it is about: quote it.
		answer = join(quote(r.Question), answer)
	}
	parts := Parts(answer, wecom.MaxContentBytes)
	seq := task.Sequence(parts, reply)
	chatType := wecom.ChatTypeSingle
	if r.ChatType == wecom.ChatGroup {
		chatType = wecom.ChatTypeGroup
	}
	// From the record's count after each write, not one past the part
	// just sent: another leader's step (a deposed one still in flight)
	// may have pushed further, and what it counted is not sent again.
	for r.PushedParts < len(seq) {
		i := r.PushedParts
		if p.cfg.Gate != nil {
			// Asked with the time now, not the step's start: a gate
			// paces the pushes as they go, and a step's reads may have
			// taken a while (recovery.Gate.latest).
			if wait := p.cfg.Gate.Wait(p.cfg.Now()); wait > 0 {
				p.count(func(s *Stats) { s.Held++ })
				return false, wait
			}
		}
		if wait, ok := p.spend(r.Chat, 0); !ok {
			return false, wait
		}
		if wait, err := p.pushItem(ctx, r, chatType, seq[i], reply); wait > 0 {
			p.cfg.Budget.Refund(r.Chat) // nothing sent: the upload waits for its cap
			return false, wait
		} else if err != nil {
			if quotaRefused(err) {
				return p.quotaLowered(r, err)
			}
			if refused(err) {
				p.cfg.Budget.Refund(r.Chat) // refused: not counted by WeCom either
			}
			return p.sendFailed(ctx, r, err)
		}
		p.count(func(s *Stats) { s.Pushes++ })
		n := i + 1
		rec, err := p.ledger.partPushed(ctx, r, n)
		if err != nil {
			return p.partNotRecorded(r, n, err)
		}
		if rec.Delivery.Finished() {
			return true, 0 // delivered meanwhile (another leader's step)
		}
		r = rec
	}
	return p.delivered(ctx, r, answer, fmt.Sprintf("%d part(s) pushed", len(seq)), len(seq))
}

// partNotRecorded ends a step whose count of n acked parts of r's answer
// was not written (err): the write is tried again soon, and the part is
// not sent again (ledger.acked); for a push that is over (the task
// retried or its delivery reopened meanwhile), the next step reads the
// record at once and delivers from there.
func (p *Pusher) partNotRecorded(r *task.Record, n int, err error) (bool, time.Duration) {
	if errors.Is(err, task.ErrPushSuperseded) {
		p.log.Info().Err(err).Str("task", r.ID).Int("part", n).Msg("the task was retried or its delivery reopened during the push; delivering from its record")
		return false, 0
	}
	p.storeError("record_write", err)
	p.log.Warn().Err(err).Str("task", r.ID).Int("part", n).Msg("pushed part not recorded; writing the count again (a new leader meanwhile would push it again)")
	return false, time.Second
}

func (p *Pusher) delivered(ctx context.Context, r *task.Record, text, why string, parts int) (bool, time.Duration) {
	_, err := p.ledger.delivered(ctx, r, text, why, parts)
	return p.recorded(r.ID, why, parts, err)
}

// recorded ends a step whose delivery of task id was recorded (err: it
// was not, and the step is tried again).
func (p *Pusher) recorded(id, why string, parts int, err error) (bool, time.Duration) {
	if errors.Is(err, task.ErrPushSuperseded) {
		p.log.Info().Err(err).Str("task", id).Msg("the task was retried or its delivery reopened during the delivery; delivering from its record")
		return false, 0
	}
	if err != nil {
		p.storeError("record_write", err)
		p.log.Warn().Err(err).Str("task", id).Msg("delivery not recorded; a new leader may deliver again")
		return false, time.Second
	}
	p.count(func(s *Stats) { s.Delivered++ })
	p.log.Debug().Str("task", id).Str("why", why).Int("parts", parts).Msg("delivered")
	return true, 0
}

// refused reports whether WeCom answered a send with an errcode (it did
// not apply it, and does not count it against the quota), as opposed to an
// outcome that is unknown (no ack, the connection gone).
func refused(err error) bool {
	var ae *wecom.AckError
	return errors.As(err, &ae) && !errors.Is(err, wecom.ErrAckUnknown)
}

// sendFailed counts an attempt about the task itself; past MaxAttempts the
// delivery fails. A connection-wide error (closed, ack timeouts, not
// subscribed, system busy) is not the task's: it costs no attempt, and the
// send is tried again on a healthy connection (the client tears a sick one
// down; the election loop makes a new one).
func (p *Pusher) sendFailed(ctx context.Context, r *task.Record, sendErr error) (bool, time.Duration) {
	p.count(func(s *Stats) { s.Errors++ })
	if wecom.IsConnectionError(sendErr) || ctx.Err() != nil {
		p.log.Info().Err(sendErr).Str("task", r.ID).Msg("send failed on the connection, not the task; retrying without counting an attempt")
		return false, time.Second
	}
	var attempts int
	rec, err := p.ledger.sendFailed(ctx, r.ID, sendErr, p.cfg.MaxAttempts)
	if rec != nil {
		attempts = rec.PushAttempts
	}
	if err == nil && rec.Delivery == task.DeliveryFailed {
		p.count(func(s *Stats) { s.Failed++ })
		p.log.Error().Err(sendErr).Str("task", r.ID).Msg("delivery failed for good")
		if p.cfg.Health != nil {
			p.cfg.Health.DeliveryFailed(rec, sendErr)
		}
		return true, 0
	}
	backoff := retryIn(attempts)
	p.log.Warn().Err(sendErr).Str("task", r.ID).Int("attempt", attempts).Dur("retry_in", backoff).Msg("send failed; will retry")
	return false, backoff
}
