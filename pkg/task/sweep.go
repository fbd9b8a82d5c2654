package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
//     a missed advisory or a lost step cannot lock a conversation.

// SweepResult counts what one Sweep did.
type SweepResult struct {
	Queued      int `json:"queued"`      // conversations with a message in the queue
	Undelivered int `json:"undelivered"` // undelivered tasks without a queue message looked at
	Released    int `json:"released"`    // queue messages of finished tasks removed
	Deadline    int `json:"deadline"`    // tasks given up past the deadline
	Unknown     int `json:"unreadable"`  // queue messages that could not be read
	Corrupt     int `json:"corrupt"`     // tasks skipped: their record does not decode (Corrupt)
}

// Sweep checks bot's queue and undelivered tasks once (see above): tasks
// past deadline are given up; a queue message whose task is finished and
// whose last change is older than grace is removed. The bot's leader runs
// it periodically; it is safe to run anywhere, any number of times.
func (l *Lifecycle) Sweep(ctx context.Context, bot string, deadline, grace time.Duration) (SweepResult, error) {
	var res SweepResult
	now := l.now()
	pastDeadline := func(r *Record) bool {
		since := r.Started
		if since.IsZero() {
			since = r.Received
		}
		return !r.Exec.Finished() && deadline > 0 && now.Sub(since) > deadline
	}
	giveUp := func(r *Record) error {
		why := fmt.Sprintf("execution deadline %s passed without an answer", deadline)
		if _, err := l.GiveUp(ctx, r.ID, why, nil); err != nil {
			return err
		}
		res.Deadline++
		l.log.Warn().Str("task", r.ID).Str("bot", bot).Str("exec", string(r.Exec)).Msg(why + "; given up")
		return nil
	}

	convs, err := l.store.QueuedConversations(ctx, bot)
	if err != nil {
		return res, err
	}
	res.Queued = len(convs)
	checked := make(map[string]bool, len(convs)) // records read here are not read again below
	for _, conv := range convs {
		msg, err := l.store.ConversationTask(ctx, bot, conv)
		if err != nil || msg == nil {
			continue
		}
		var m Message
		if err := json.Unmarshal(msg.Data, &m); err != nil || m.TaskID == "" {
			res.Unknown++
			continue // the worker that pulls it terminates it
		}
		r, _, err := Get(ctx, l.store.Tasks(), m.TaskID)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // a worker opens it from the message
		}
		if errors.Is(err, ErrCorruptRecord) {
			res.Corrupt++
			checked[m.TaskID] = true
			if removed, err := l.sweepCorrupt(ctx, bot, m.TaskID, msg, deadline, err); err != nil {
				return res, err
			} else if removed {
				res.Released++
			}
			continue
		}
		if err != nil {
			return res, err
		}
		checked[r.ID] = true
		switch {
		case r.Exec.Finished() && now.Sub(r.execChanged()) > grace && now.Sub(msg.Time) > grace:
			if err := l.store.RemoveTask(ctx, msg.Sequence); err != nil {
				return res, err
			}
			res.Released++
			l.log.Info().Str("task", r.ID).Str("bot", bot).Str("exec", string(r.Exec)).Msg("queue message of a finished task removed; conversation freed")
		case pastDeadline(r):
			if err := giveUp(r); err != nil {
				return res, err
			}
		}
	}

	// Tasks off the queue (fixed worker, the leader's own) end too.
	ids, err := l.store.UndeliveredTasks(ctx, bot)
	if err != nil {
		return res, err
	}
	for _, id := range ids {
		if checked[id] {
			continue
		}
		r, _, err := Get(ctx, l.store.Tasks(), id)
		if errors.Is(err, ErrCorruptRecord) {
			res.Corrupt++
			l.Corrupt(bot, id, CorruptAtSweep, err)
		}
		if err != nil {
			continue
		}
		res.Undelivered++
		if pastDeadline(r) {
			if err := giveUp(r); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// SweepInterval is how often a bot's leader runs the sweep (RunSweep):
// deadlines, and queue messages of finished tasks.
const SweepInterval = time.Minute

// RunSweep runs Sweep of bot every SweepInterval until ctx (the leader's
// term) ends. A failed round is logged and retried the next round.
func (l *Lifecycle) RunSweep(ctx context.Context, bot string, deadline, grace time.Duration) {
	t := time.NewTicker(SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := l.Sweep(ctx, bot, deadline, grace)
		if err != nil && ctx.Err() == nil {
			l.log.Warn().Err(err).Str("bot", bot).Msg("task sweep failed; retrying next round")
		}
		if res.Released > 0 || res.Deadline > 0 {
			l.log.Info().Str("bot", bot).Interface("sweep", res).Msg("task sweep")
		}
	}
}

// execChanged is when the execution dimension last changed.
func (r *Record) execChanged() time.Time {
	for i := len(r.Transitions) - 1; i >= 0; i-- {
		if r.Transitions[i].Dim == "exec" {
			return r.Transitions[i].At
		}
	}
	return r.Received
}

// maxDeliveriesAdvisory is the part of the server's advisory we read.
type maxDeliveriesAdvisory struct {
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// WatchMaxDeliveries gives up every task whose queue message reaches the
// queue's last delivery unacked, as the server announces it, until ctx
// ends. Every node may run it: they share the announcements (a queue
// group), and GiveUp is idempotent.
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
			l.log.Warn().Uint64("seq", a.StreamSeq).Msg("max-deliveries advisory dropped (backlog); the sweep finds the task")
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe to the queue's max-deliveries advisories: %w", err)
	}
	defer sub.Unsubscribe()
	for {
		select {
		case <-ctx.Done():
			return nil
		case a := <-work:
			if err := l.maxDelivered(ctx, a); err != nil && ctx.Err() == nil {
				l.log.Warn().Err(err).Uint64("seq", a.StreamSeq).Msg("task past its last delivery not given up; the deadline sweep will")
			}
		}
	}
}

func (l *Lifecycle) maxDelivered(ctx context.Context, a maxDeliveriesAdvisory) error {
	msg, err := l.store.TaskStream().GetMsg(ctx, a.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // already removed (its worker gave up, or it was canceled)
	}
	if err != nil {
		return err
	}
	reason := fmt.Sprintf("its queue message was delivered %d times without finishing (a worker died or stopped on its last delivery)", a.Deliveries)
	var m Message
	if err := json.Unmarshal(msg.Data, &m); err != nil || m.TaskID == "" {
		return l.store.RemoveTask(ctx, a.StreamSeq)
	}
	// A task whose record never landed (the leader's write and every
	// worker's Start failed) gets one now, so that giving it up tells the
	// user, instead of removing its message in silence.
	if _, err := l.Open(ctx, RecordOf(m)); err != nil {
		return err
	}
	if _, err := l.GiveUp(ctx, m.TaskID, reason, nil); err != nil {
		return err
	}
	// GiveUp frees the conversation's message if it is this task's; make
	// sure of this exact one.
	return l.store.RemoveTask(ctx, a.StreamSeq)
}
