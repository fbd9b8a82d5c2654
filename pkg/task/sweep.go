package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Every task ends. Three paths make sure of it, besides the worker's own:
//
//   - the server's MAX_DELIVERIES advisory (WatchMaxDeliveries): a queue
//     message whose last delivery ended unacked (its worker killed, or it
//     nak'd it) can never run again; it is given up at once, its
//     conversation freed and the user told;
//   - the execution deadline (Sweep): a task not finished Deadline after
//     its first attempt began (or after it was received, if none began) is
//     given up, wherever it runs (queue, fixed worker, leader);
//   - the queue sweep (Sweep): a queue message whose record is already
//     finished (an ack lost, a cancel whose removal failed) is removed, so
//     a missed advisory or a lost step cannot lock a conversation; and a
//     queue message older than the deadline whose task has no record that
//     can be read or written (the tasks bucket failing, a record that
//     never landed) is removed all the same, its ending owed (release.go).
//
// So no conversation stays busy longer than the deadline plus one sweep
// interval (WithSweepInterval), whatever the tasks bucket does.

// SweepResult counts what one Sweep did.
type SweepResult struct {
	Queued      int `json:"queued"`      // conversations with a message in the queue
	Undelivered int `json:"undelivered"` // undelivered tasks without a queue message looked at
	Released    int `json:"released"`    // queue messages of finished tasks removed
	Deadline    int `json:"deadline"`    // tasks given up past the deadline
	Unknown     int `json:"unreadable"`  // queue messages that could not be read
	// Abandoned: queue messages past the deadline removed although no
	// record says the task ended (none could be read or written; the
	// ending is owed), or that were not a task's.
	Abandoned int `json:"abandoned"`
	Owed      int `json:"owed"`    // owed endings written (see release.go)
	Corrupt   int `json:"corrupt"` // tasks skipped: their record does not decode (Corrupt)
	// Newer: queue messages and records left alone because a newer
	// botctl wrote them (schema.ErrNewer); a node of that version sweeps them.
	Newer int `json:"newer,omitempty"`
	// Unreceived: tasks whose files were still being received past their
	// deadline (the leader receiving them died): given up (receiving.go).
	Unreceived int `json:"unreceived"`
}

// Sweep checks bot's queue and undelivered tasks once (see above): tasks
// past deadline are given up; a queue message whose task is finished and
// whose last change is older than grace is removed; a queue message older
// than deadline whose task has no record to read, or whose ending cannot
// be written, is removed regardless. The bot's leader runs it
// periodically; it is safe to run anywhere, any number of times. An error
// is the first step that failed; the round went on past it.
//
// What to do with each message and task is decided by decideQueued and
// decideUndelivered (sweepselect.go); Sweep reads their inputs and
// performs what they say.
func (l *Lifecycle) Sweep(ctx context.Context, bot string, deadline, grace time.Duration) (SweepResult, error) {
	s := &sweepRound{l: l, bot: bot, now: l.now(), rules: sweepRules{deadline: deadline, grace: grace},
		why: fmt.Sprintf("execution deadline %s passed without an answer", deadline)}
	q, err := l.store.ListQueue(ctx, bot)
	if err != nil {
		return s.res, err
	}
	s.res.Queued = len(q.Conversations)
	checked := make(map[string]bool, len(q.Conversations)) // records read here are not read again below
	for _, conv := range q.Conversations {
		msg, err := l.store.ConversationTask(ctx, bot, conv)
		if err != nil || msg == nil {
			continue
		}
		if err := schema.Check(KindMessage, msg.Data); err != nil {
			s.newer(err)
			continue
		}
		m, in, err := s.readQueued(ctx, msg)
		if errors.Is(err, schema.ErrNewer) {
			checked[m.TaskID] = true
			s.newer(err)
			continue
		}
		if in.read == recordFound || in.read == recordCorrupt {
			checked[m.TaskID] = true
		}
		s.doQueued(ctx, decideQueued(s.now, q.ServerTime, s.rules, in), msg, m, in.rec, err)
	}
	if s.failing != nil {
		s.fail(s.failing)
		return s.res, s.first // the rest needs the tasks bucket
	}

	// Tasks off the queue (fixed worker, the leader's own) end too.
	ids, err := l.store.UndeliveredTasks(ctx, bot)
	if err != nil {
		s.fail(err)
		return s.res, s.first
	}
	for _, id := range ids {
		if checked[id] {
			continue
		}
		r, _, err := Get(ctx, l.store.Tasks(), id)
		if errors.Is(err, schema.ErrNewer) {
			s.newer(err)
			continue
		}
		read := readOf(err)
		if read == recordFound {
			s.res.Undelivered++
		}
		switch decideUndelivered(s.now, s.rules, read, r) {
		case sweepCorrupt:
			s.res.Corrupt++
			l.Corrupt(bot, id, CorruptAtSweep, err)
		case sweepGiveUp:
			if err := s.giveUp(ctx, r); err != nil {
				s.fail(err)
			}
		case sweepUnreceived:
			if _, err := l.GiveUp(ctx, r.ID, unreceivedWhy, nil); err != nil {
				s.fail(err)
				continue
			}
			s.res.Unreceived++
			l.log.Warn().Str("task", r.ID).Str("bot", bot).Time("receiving_until", r.ReceivingUntil).Msg(unreceivedWhy + "; given up")
		}
	}
	s.res.Owed = l.settleOwed(ctx, bot)
	return s.res, s.first
}

// unreceivedWhy is the reason of a task given up by sweepUnreceived.
const unreceivedWhy = "files not received: the node receiving them stopped before they were stored"

// sweepRound is one round of Sweep: its settings, what it did and what
// failed.
type sweepRound struct {
	l     *Lifecycle
	bot   string
	now   time.Time
	rules sweepRules
	why   string // the reason written in the records of tasks given up
	res   SweepResult
	first error // the first failed step; the round goes on
	// failing is the tasks bucket's error once a read or write of it
	// failed this round: the rest of the round asks it nothing more and
	// goes by the queue messages' age alone, so a round waits for one
	// timeout of a failing bucket, not one per conversation.
	failing error
}

// newer leaves a message or record a newer botctl wrote for a node of
// that version, and says so.
func (s *sweepRound) newer(err error) {
	s.res.Newer++
	s.l.log.Warn().Err(err).Str("bot", s.bot).Msg("sweep leaves a record it does not understand")
}

func (s *sweepRound) fail(err error) {
	if s.first == nil {
		s.first = err
	}
}

// readQueued reads what decideQueued needs of queue message msg: the task
// it carries and, unless the bucket fails, its record. The error is the
// record read's.
func (s *sweepRound) readQueued(ctx context.Context, msg *natsjs.RawStreamMsg) (Message, queued, error) {
	in := queued{sent: msg.Time}
	var m Message
	if err := json.Unmarshal(msg.Data, &m); err != nil || m.TaskID == "" {
		return m, in, nil
	}
	in.task = m.TaskID
	if s.failing != nil {
		in.read = recordFailing
		return m, in, nil
	}
	r, _, err := Get(ctx, s.l.store.Tasks(), m.TaskID)
	if errors.Is(err, schema.ErrNewer) {
		return m, in, err // left alone (Sweep)
	}
	in.rec, in.read = r, readOf(err)
	switch in.read {
	case recordFailing:
		s.failing = err
	case recordError:
		s.fail(err)
	}
	return m, in, err
}

// doQueued performs a, decided for queue message msg of task m (record r
// when read; err: the record read's error).
func (s *sweepRound) doQueued(ctx context.Context, a sweepAction, msg *natsjs.RawStreamMsg, m Message, r *Record, err error) {
	switch a {
	case sweepUnreadable, sweepRemoveUnreadable:
		s.res.Unknown++
		if a == sweepRemoveUnreadable {
			s.remove(ctx, msg, "", "unreadable queue message past the deadline removed; conversation freed")
		}
	case sweepCorrupt, sweepRemoveCorrupt:
		// Its task can never start (Start reads the record first).
		s.res.Corrupt++
		s.l.Corrupt(s.bot, m.TaskID, CorruptAtSweep, err)
		if a == sweepRemoveCorrupt {
			s.remove(ctx, msg, m.TaskID, "queue message of a task whose record does not decode removed past the execution deadline; conversation freed")
		}
	case sweepAbandon:
		s.abandon(ctx, msg, m)
	case sweepRelease:
		if err := s.l.store.RemoveTask(ctx, msg.Sequence); err != nil {
			s.fail(err)
			return
		}
		s.res.Released++
		s.l.log.Info().Str("task", r.ID).Str("bot", s.bot).Str("exec", string(r.Exec)).Msg("queue message of a finished task removed; conversation freed")
	case sweepGiveUp:
		if err := s.giveUp(ctx, r); err != nil {
			// The record cannot say so now; the next round does (from
			// the undelivered index). The conversation is freed now.
			s.fail(err)
			if StoreFailed(err) {
				s.failing = err
			}
			s.remove(ctx, msg, r.ID, "queue message of a task past the deadline removed, its record not written; conversation freed")
		}
	}
}

func (s *sweepRound) giveUp(ctx context.Context, r *Record) error {
	if _, err := s.l.GiveUp(ctx, r.ID, s.why, nil); err != nil {
		return err
	}
	s.res.Deadline++
	s.l.log.Warn().Str("task", r.ID).Str("bot", s.bot).Str("exec", string(r.Exec)).Msg(s.why + "; given up")
	return nil
}

// remove removes queue message msg of task (what: the log's message).
func (s *sweepRound) remove(ctx context.Context, msg *natsjs.RawStreamMsg, task, what string) {
	if err := s.l.store.RemoveTask(ctx, msg.Sequence); err != nil {
		s.fail(err)
		return
	}
	s.res.Abandoned++
	s.l.log.Warn().Str("task", task).Str("bot", s.bot).Uint64("seq", msg.Sequence).Msg(what)
}

// abandon frees a conversation held past the deadline by the message of a
// task whose record cannot be read: none landed, or the bucket fails. The
// record is made from the message and failed if the bucket answers;
// otherwise the ending is owed.
func (s *sweepRound) abandon(ctx context.Context, msg *natsjs.RawStreamMsg, m Message) {
	if s.failing == nil {
		rec, err := s.l.end(ctx, m, s.why, endDeadline, s.rules.deadline)
		switch {
		case err == nil && rec == "running":
			return // its record landed meanwhile: a worker runs it
		case err == nil:
			s.res.Deadline++
			s.l.log.Warn().Str("task", m.TaskID).Str("bot", s.bot).Str("record", rec).Msg(s.why + "; its queue message had no record; given up")
			if err := s.l.store.RemoveTask(ctx, msg.Sequence); err != nil { // GiveUp's own removal may have failed
				s.fail(err)
			}
			return
		case StoreFailed(err):
			s.failing = err
		}
	}
	s.l.owe(m, s.why, endDeadline, s.rules.deadline)
	s.remove(ctx, msg, m.TaskID, "queue message past the deadline with no record that can be written removed; conversation freed")
}

// SweepInterval is how often a bot's leader runs the sweep (RunSweep) by
// default: deadlines, queue messages of finished tasks, owed endings.
const SweepInterval = time.Minute

// RunSweep runs Sweep of bot every sweep interval (SweepInterval, or
// WithSweepInterval's) until ctx (the leader's term) ends. A failed round
// is logged and retried the next round.
func (l *Lifecycle) RunSweep(ctx context.Context, bot string, deadline, grace time.Duration) {
	t := clock.Or(l.timers).NewTicker(l.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		res, err := l.Sweep(ctx, bot, deadline, grace)
		if err != nil && ctx.Err() == nil {
			l.log.Warn().Err(err).Str("bot", bot).Msg("task sweep failed; retrying next round")
		}
		if res.Released > 0 || res.Deadline > 0 || res.Abandoned > 0 || res.Owed > 0 {
			l.log.Info().Str("bot", bot).Interface("sweep", res).Msg("task sweep")
		}
	}
}

// maxDeliveriesAdvisory is the part of the server's advisory we read.
type maxDeliveriesAdvisory struct {
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// WatchMaxDeliveries gives up every task whose queue message reaches the
// queue's last delivery unacked, as the server announces it, until ctx
// ends. Every node may run it: they share the announcements (a queue
// group), and GiveUp is idempotent. An announcement whose work fails (the
// task stream failing) is retried every AdvisoryRetry; so are the endings
// this node owes (release.go).
func (l *Lifecycle) WatchMaxDeliveries(ctx context.Context) error {
	nc := l.store.JetStream().Conn()
	work := make(chan maxDeliveriesAdvisory, 1024)
	sub, err := nc.QueueSubscribe(l.store.MaxDeliveriesSubject(), "botctl-lifecycle", func(m *nats.Msg) {
		var a maxDeliveriesAdvisory
		if json.Unmarshal(m.Data, &a) != nil || a.StreamSeq == 0 {
			return
		}
		select {
		case work <- a:
		default:
			l.log.Warn().Uint64("seq", a.StreamSeq).Msg("max-deliveries advisory dropped (backlog); the sweep frees its conversation past the deadline")
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe to the queue's max-deliveries advisories: %w", err)
	}
	defer sub.Unsubscribe()
	retry := clock.Or(l.timers).NewTicker(AdvisoryRetry)
	defer retry.Stop()
	later := make(map[uint64]maxDeliveriesAdvisory) // by stream sequence
	for {
		select {
		case <-ctx.Done():
			return nil
		case a := <-work:
			if err := l.maxDelivered(ctx, a); err != nil && ctx.Err() == nil {
				if len(later) >= cap(work) {
					l.log.Warn().Err(err).Uint64("seq", a.StreamSeq).Msg("task past its last delivery not given up, and too many to retry; the sweep frees its conversation past the deadline")
					continue
				}
				later[a.StreamSeq] = a
				l.log.Warn().Err(err).Uint64("seq", a.StreamSeq).Dur("retry_in", AdvisoryRetry).Msg("task past its last delivery not given up yet; retrying")
			}
		case <-retry.C():
			for seq, a := range later {
				if err := l.maxDelivered(ctx, a); err != nil {
					break // still failing: the next tick
				}
				delete(later, seq)
			}
			l.settleOwed(ctx, "")
		}
	}
}

// AdvisoryRetry is how often WatchMaxDeliveries retries the work of an
// announcement that failed, and writes owed endings.
const AdvisoryRetry = 5 * time.Second

// maxDelivered gives up the task at a's sequence. Its queue message can
// never run again: it is removed even when the task's record cannot be
// written (the ending is owed then); an error means the message could not
// be read or removed.
func (l *Lifecycle) maxDelivered(ctx context.Context, a maxDeliveriesAdvisory) error {
	msg, err := l.store.TaskStream().GetMsg(ctx, a.StreamSeq)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return nil // already removed (its worker gave up, or it was canceled)
	}
	if err != nil {
		return err
	}
	if err := schema.Check(KindMessage, msg.Data); err != nil {
		// Its task is a newer botctl's to end: the message stays (no
		// longer delivered) until a node of that version sweeps it.
		l.log.Warn().Err(err).Uint64("seq", a.StreamSeq).Msg("task past its last delivery left for a newer node")
		return nil
	}
	reason := fmt.Sprintf("its queue message was delivered %d times without finishing (a worker died or stopped on its last delivery)", a.Deliveries)
	var m Message
	if err := json.Unmarshal(msg.Data, &m); err != nil || m.TaskID == "" {
		return l.store.RemoveTask(ctx, a.StreamSeq)
	}
	if l.requeueLive(ctx, m, msg) {
		return nil
	}
	// A task whose record never landed (the leader's write and every
	// worker's Start failed) gets one now, so that giving it up tells the
	// user, instead of removing its message in silence.
	if _, err := l.end(ctx, m, reason, endGiveUp, 0); err != nil {
		l.owe(m, reason, endGiveUp, 0)
	}
	// GiveUp frees the conversation's message if it is this task's; make
	// sure of this exact one, whatever became of the record.
	return l.store.RemoveTask(ctx, a.StreamSeq)
}

// MaxRequeues bounds the times one task's queue message is requeued past
// its last delivery for an attempt still running (requeueLive).
const MaxRequeues = 3

// requeueLive requeues msg, past its last delivery, with fresh deliveries
// when its task's current attempt began less than half the queue's ack
// wait ago, and reports whether it did. Such a task was not worn out by
// attempts that died (a dead attempt's delivery ends at the ack wait
// after it began): its deliveries went to hand-offs no attempt caused, a
// node stopping gracefully that handed its task back, or a NATS server
// restarting that handed the message out again while its attempt ran.
// The copy's delivery supersedes the running attempt (a fresh start, one
// answer: the older attempt is fenced) or finds the task finished and is
// acked. At most MaxRequeues times a task; then, or when the record
// cannot be read or the requeue fails, the task is given up as before.
func (l *Lifecycle) requeueLive(ctx context.Context, m Message, msg *natsjs.RawStreamMsg) bool {
	n := jetstream.Requeues(msg.Header)
	if n >= MaxRequeues {
		return false
	}
	r, err := l.Get(ctx, m.TaskID)
	if err != nil || r.Exec != Running {
		return false
	}
	began := r.execChanged()
	if l.now().Sub(began) >= l.store.Options().TaskAckWait/2 {
		return false
	}
	res, err := l.store.RequeueStored(ctx, msg)
	if err != nil {
		l.log.Warn().Err(err).Str("task", m.TaskID).Msg("task past its last delivery with an attempt running not requeued; giving it up")
		return false
	}
	l.log.Info().Str("task", m.TaskID).Str("bot", m.Bot).Int("attempt", r.Attempt).Time("attempt_began", began).Int("requeues", n+1).Uint64("seq", res.Seq).
		Msg("task past its last delivery while an attempt runs: requeued with fresh deliveries (they went to hand-offs, not to attempts that died)")
	return true
}
