package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// SpoolOut is the spool's way out: what becomes of a task the node kept
// on disk while JetStream could not take it, once JetStream answers
// again. Queued in order, unless a fallback tier ran it to its end
// meanwhile: one still running on a fallback tier is queued too, as the
// copy that holds its conversation until it ends (the worker that pulls
// it holds it: task.ErrRunningOffQueue), so that a new question gets the
// busy reply rather than a second answer running beside the first.
// Refused on the way out (rejected, or its conversation busy by then),
// recorded as such so that the pusher tells the user, who was told
// "received".
type SpoolOut struct {
	store   SpoolQueue
	lc      SpoolRecords
	log     zerolog.Logger
	leaders SpoolNotice         // the bot's pusher learns of each task refused, when this node leads it (nil: none)
	forward jetstream.Publisher // to the task queue
}

// NewSpoolOut is the way out of the spool into store's task queue, with
// lc the writer of task records; leaders, if not nil, hears of every
// spooled task recorded refused or expired.
func NewSpoolOut(store SpoolQueue, lc SpoolRecords, log zerolog.Logger, leaders SpoolNotice) *SpoolOut {
	s := &SpoolOut{store: store, lc: lc, log: log, leaders: leaders}
	s.forward = store.SpoolPublisher(s.forwarded)
	return s
}

// SpoolQueue is the task queue as the spool's way out uses it
// (jetstream.Store).
type SpoolQueue interface {
	// SpoolPublisher publishes spooled entries to the queue, each one's
	// result told to report.
	SpoolPublisher(report func(e jetstream.SpoolEntry, res jetstream.PublishResult, err error)) jetstream.PublishFunc
	// ConversationTask is the queue's message that holds conversation
	// now (nil: none).
	ConversationTask(ctx context.Context, bot, conversation string) (*natsjs.RawStreamMsg, error)
}

// SpoolRecords are the task lifecycle's steps the spool's way out takes
// (task.Lifecycle).
type SpoolRecords interface {
	Get(ctx context.Context, id string) (*task.Record, error)
	Open(ctx context.Context, r *task.Record) (*task.Record, error)
	Refused(ctx context.Context, m task.Message, reason string, busy bool) (*task.Record, error)
	Corrupt(bot, id, where string, err error)
}

// SpoolNotice hears of a spooled task recorded refused or expired, for
// the bot's pusher to tell its user.
type SpoolNotice interface {
	Forwarded(bot, taskID string)
}

// Publish is the forwarder's Publisher: an error keeps the entry for a
// later try.
func (s *SpoolOut) Publish(ctx context.Context, e jetstream.SpoolEntry) error {
	// A fallback tier ran the task during the outage: once it has ended,
	// queueing it would only hold its conversation for nothing.
	switch state, err := s.offQueue(ctx, e); {
	case err != nil:
		return err // JetStream still away: keep the entry
	case state == ranToEnd:
		s.log.Info().Str("bot", e.Bot).Str("msgid", e.MsgID).Msg("spooled task already answered by a fallback tier; not queued again")
		return nil
	case state == corrupt:
		return nil // dropped (offQueue reported it): the entries behind it go on
	case state == runningOffQueue:
		s.log.Info().Str("bot", e.Bot).Str("msgid", e.MsgID).Msg("spooled task still running on a fallback tier; queued to hold its conversation")
	case e.Late:
		if err := s.markLate(ctx, &e); err != nil {
			return err
		}
	}
	return s.forward.Publish(ctx, e)
}

// What a fallback tier did with a spooled task.
type offQueueState int

const (
	notRun          offQueueState = iota // never started: the queue runs it
	runningOffQueue                      // started off the queue, not ended
	ranToEnd                             // ended (answered, failed or canceled)
	corrupt                              // its record does not decode: no tier can run it
)

// forwarded hears how the queue took a forwarded entry.
func (s *SpoolOut) forwarded(e jetstream.SpoolEntry, res jetstream.PublishResult, err error) {
	s.log.Info().Str("bot", e.Bot).Str("msgid", e.MsgID).AnErr("result", err).Bool("duplicate", res.Duplicate).Msg("spooled task forwarded")
	if err == nil {
		return
	}
	// Refused on the way out of the spool: the user was told "received",
	// so record the refusal for the pusher to tell them, instead of
	// dropping it in silence.
	ctx, cancel := context.WithTimeout(context.Background(), refusedTimeout)
	defer cancel()
	s.refused(ctx, e, err)
	if s.leaders != nil {
		s.leaders.Forwarded(e.Bot, task.ID(e.Bot, e.MsgID))
	}
}

// refusedTimeout bounds recording a refusal (a few bucket operations).
const refusedTimeout = 30 * time.Second

// offQueue reports what a fallback tier did with the spooled task e while
// the queue was away.
func (s *SpoolOut) offQueue(ctx context.Context, e jetstream.SpoolEntry) (offQueueState, error) {
	var m task.Message
	if json.Unmarshal(e.Payload, &m) != nil || m.TaskID == "" {
		return notRun, nil // forwarded as is; the worker terminates it
	}
	r, err := s.lc.Get(ctx, m.TaskID)
	switch {
	case errors.Is(err, natsjs.ErrKeyNotFound):
		return notRun, nil
	case errors.Is(err, task.ErrCorruptRecord):
		// Kept, it would block the spool for good (it drains in order);
		// queued, it would hold its conversation with a task no worker
		// can start.
		s.lc.Corrupt(e.Bot, m.TaskID, task.CorruptAtSpool, err)
		return corrupt, nil
	case err != nil:
		return notRun, err
	case r.Exec.Finished():
		return ranToEnd, nil
	case r.Attempt > 0:
		return runningOffQueue, nil
	}
	return notRun, nil
}

// refused records a spooled task that the queue refused when it was
// forwarded: a busy refusal decided late (the conversation's earlier task
// still runs), which is an answer, or a failure with the reason. Unless
// the task is under way or answered (then the refusal was the queue
// holding this very task).
func (s *SpoolOut) refused(ctx context.Context, e jetstream.SpoolEntry, cause error) {
	var m task.Message
	if err := json.Unmarshal(e.Payload, &m); err != nil || m.TaskID == "" {
		s.log.Error().Err(err).Str("msgid", e.MsgID).Msg("spooled entry unreadable; dropped")
		return
	}
	reason, busy := "busy: the conversation's earlier question was still being answered when this one was forwarded after an outage", true
	if errors.Is(cause, jetstream.ErrConversationBusy) {
		if msg, err := s.store.ConversationTask(ctx, m.Bot, m.Chat); err == nil && msg != nil {
			var q task.Message
			if json.Unmarshal(msg.Data, &q) == nil && q.TaskID == m.TaskID {
				return // the queue holds this task already
			}
		}
	} else {
		reason, busy = "refused by the task queue after an outage: "+cause.Error(), false
	}
	if _, err := s.lc.Refused(ctx, m, reason, busy); err != nil {
		s.log.Warn().Err(err).Str("task", m.TaskID).Msg("spooled task refused, and its record not updated yet: the refusal is owed, written once the tasks bucket answers")
	}
}
