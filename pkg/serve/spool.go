package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/dispatch"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/worker"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// spoolOut is the spool's way out: what becomes of a task the node kept
// on disk while JetStream could not take it, once JetStream answers
// again. Queued in order, unless a fallback tier ran it to its end
// meanwhile: one still running on a fallback tier is queued too, as the
// copy that holds its conversation until it ends (the worker that pulls
// it holds it: task.ErrRunningOffQueue), so that a new question gets the
// busy reply rather than a second answer running beside the first.
// Refused on the way out (rejected, or its conversation busy by then),
// recorded as such so that the pusher tells the user, who was told
// "received".
type spoolOut struct {
	store   *jetstream.Store
	lc      *task.Lifecycle
	log     zerolog.Logger
	leaders *leaders            // the bot's pusher learns of each task taken, when this node leads it
	forward jetstream.Publisher // to the task queue
}

func newSpoolOut(store *jetstream.Store, lc *task.Lifecycle, log zerolog.Logger, leaders *leaders) *spoolOut {
	s := &spoolOut{store: store, lc: lc, log: log, leaders: leaders}
	s.forward = store.SpoolPublisher(s.forwarded)
	return s
}

// Publish is the forwarder's Publisher: an error keeps the entry for a
// later try.
func (s *spoolOut) Publish(ctx context.Context, e jetstream.SpoolEntry) error {
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
func (s *spoolOut) forwarded(e jetstream.SpoolEntry, res jetstream.PublishResult, err error) {
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
func (s *spoolOut) offQueue(ctx context.Context, e jetstream.SpoolEntry) (offQueueState, error) {
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
func (s *spoolOut) refused(ctx context.Context, e jetstream.SpoolEntry, cause error) {
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
		s.log.Error().Err(err).Str("task", m.TaskID).Msg("spooled task refused, and its record not updated")
	}
}

// handOff is the inbound path's Dispatcher: the dispatcher once
// JetStream is bound; before that, the spool (busy if the conversation
// already has a spooled task, as the dispatcher itself would answer).
type handOff struct{ n *Node }

func (h handOff) DispatchUnless(ctx context.Context, m task.Message, dup func() bool) (dispatch.Outcome, error) {
	n := h.n
	if n.started() {
		return n.Dispatch.DispatchUnless(ctx, m, dup)
	}
	if n.Spool.Holds(m.Bot, m.Chat) {
		return dispatch.Outcome{Busy: true}, nil
	}
	payload, err := json.Marshal(m)
	if err != nil {
		return dispatch.Outcome{}, err
	}
	if err := n.spoolTask(m, payload); err != nil {
		return dispatch.Outcome{}, fmt.Errorf("JetStream not reachable and the spool refused the task: %w", err)
	}
	n.log.Info().Str("bot", m.Bot).Str("task", m.TaskID).Msg("JetStream not reachable yet: task spooled")
	return dispatch.Outcome{Spooled: true}, nil
}

// taskSpool is the dispatcher's Spool: the node's spool, whose forwarder
// is woken for every task kept.
type taskSpool struct {
	n   *Node
	fwd *jetstream.Forwarder
}

func (s taskSpool) Keep(m task.Message, payload []byte) error {
	err := s.n.spoolTask(m, payload)
	s.fwd.Kick()
	return err
}

func (s taskSpool) Holds(bot, conversation string) bool { return s.n.Spool.Holds(bot, conversation) }

func (n *Node) spoolTask(m task.Message, payload []byte) error {
	return n.Spool.Append(jetstream.SpoolEntry{Bot: m.Bot, Conversation: m.Chat, MsgID: m.MsgID, Payload: payload, Received: m.Received})
}

// localTier is the dispatcher's tier 3: this node's worker, bounded by
// its slots (a full node refuses, and the dispatcher keeps the task in
// the spool for the queue). The task runs under ctx (the node's work)
// and wg tracks it.
type localTier struct {
	ctx context.Context
	w   *worker.Worker
	wg  *sync.WaitGroup
}

func (l localTier) Start(m task.Message) error {
	return l.w.Go(l.ctx, m, string(dispatch.TierLocal), l.wg)
}
