package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/schema"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// The execution dimension: a task is opened, started (one attempt after
// another, each fenced), and ends succeeded, failed or canceled; an operator
// may retry it or redeliver its ending.

// Open records a task: the leader's inbound path after dispatch (with the
// receipt, if it was sent), a worker that pulled a task whose record has
// not landed yet, a spooled task. Idempotent: when the record exists the
// leader's fields are merged in (its req_id, term, stream and tier, and
// the receipt), nothing else changes. Every opened task is in the
// undelivered index until its delivery is final.
func (l *Lifecycle) Open(ctx context.Context, r *Record) (*Record, error) {
	cur, err := l.open(ctx, r)
	if err != nil {
		return nil, err
	}
	if !cur.Delivery.Finished() {
		if err := l.store.MarkUndelivered(ctx, cur.Bot, cur.ID); err != nil {
			// Say so in the record, so that the next Start repairs it.
			l.update(context.WithoutCancel(ctx), cur.ID, func(r *Record) error {
				if r.NotIndexed {
					return ErrNoChange
				}
				r.NotIndexed = true
				return nil
			})
			return cur, fmt.Errorf("task %s recorded, not indexed as undelivered (repaired when it starts): %w", cur.ID, err)
		}
	}
	return cur, nil
}

// openTries bounds open's tries when a create is refused as "exists" and
// the record is then not found.
const openTries = 20

// open creates r's record, or merges the leader's fields into the one
// there. On a replicated bucket a create racing another's (the leader's
// Open and a worker's Start of the same task) can be refused while the
// other write is still in flight — nats-server answers "wrong last
// sequence" before that write is applied — and the read that follows then
// finds nothing: open tries again, briefly, until the other write has
// landed (or, if it failed, its own create succeeds). Without this the
// worker's Start failed and its task waited for a second delivery.
func (l *Lifecycle) open(ctx context.Context, r *Record) (*Record, error) {
	for try := 0; ; try++ {
		jetstream.CASPause(ctx, try)
		cur, err := l.openOnce(ctx, r)
		if err == nil || !errors.Is(err, natsjs.ErrKeyNotFound) || try >= openTries || ctx.Err() != nil {
			return cur, err
		}
	}
}

// openOnce is one try of open.
func (l *Lifecycle) openOnce(ctx context.Context, r *Record) (*Record, error) {
	cur := r
	if _, err := create(ctx, l.store.Tasks(), r); errors.Is(err, natsjs.ErrKeyExists) {
		cur, err = l.update(ctx, r.ID, l.rules().Merge(r))
		if err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	return cur, nil
}

// Start begins an attempt of the task of m, on tier, at the queue's
// delivery count deliveries (0 off the queue): the record becomes running
// under the next attempt number, which the caller passes to Finish, Fail
// and its output writer. A record that does not exist yet is opened from
// m. ErrFinished: nothing to run (the caller acks and moves on).
//
// A running record is taken over: the attempt it names is superseded (a
// redelivery after the ack wait means its worker is gone or stalled; a
// fallback tier racing a stored publish is the other case). Except by a
// queue delivery (deliveries > 0) when the attempt runs off the queue and
// is alive: that is the copy the spool forwarded to hold the
// conversation, and Start returns ErrRunningOffQueue, changing nothing.
func (l *Lifecycle) Start(ctx context.Context, m Message, tier string, deliveries int) (int, *Record, error) {
	cur, rev, err := l.awaitOpen(ctx, m.TaskID, deliveries)
	switch {
	case errors.Is(err, natsjs.ErrKeyNotFound):
		if _, err := l.Open(ctx, RecordOf(m)); err != nil {
			return 0, nil, err
		}
	case err != nil:
		return 0, nil, err
	case deliveries > 0 && l.offQueueAlive(ctx, cur):
		return 0, cur, fmt.Errorf("%w: attempt %d on %s (tier %s)", ErrRunningOffQueue, cur.Attempt, cur.Node, cur.Tier)
	}
	seen := 0 // the attempt off the queue found silent above, if any
	indexed := false
	if cur != nil {
		seen = cur.Attempt
		// Repair an index entry that Open could not write.
		indexed = cur.NotIndexed && l.store.MarkUndelivered(ctx, cur.Bot, cur.ID) == nil
	}
	var attempt int
	fn := l.rules().Start(tier, deliveries, seen, indexed, &attempt)
	var r *Record
	if cur != nil {
		r, err = updateFrom(ctx, l.store.Tasks(), cur, rev, fn) // the read above: no second one
	} else {
		r, err = l.update(ctx, m.TaskID, fn)
	}
	if err != nil {
		return 0, r, err
	}
	return attempt, r, nil
}

// openWaitTries is how many more reads a queue task's Start gives the
// leader's Open (CASPause's growing pauses: about 0.2 s in all) before it
// opens the record itself.
var openWaitTries = 8 // a var: a test gives a slow machine more

// awaitOpen reads task id's record for Start. A queue delivery can come
// before the leader's Open (the leader publishes the task, then writes its
// record): rather than race it with a create of its own (a create refused
// while the other is in flight, then merges and re-reads: ten requests or
// more), the worker reads again a few times; only a record still missing
// (the leader died between the two) is opened here. Off the queue
// (deliveries 0) the caller opened it already, or nobody will.
func (l *Lifecycle) awaitOpen(ctx context.Context, id string, deliveries int) (*Record, uint64, error) {
	for try := 0; ; try++ {
		jetstream.CASPause(ctx, try)
		r, rev, err := Get(ctx, l.store.Tasks(), id)
		if !errors.Is(err, natsjs.ErrKeyNotFound) || deliveries == 0 || try >= openWaitTries || ctx.Err() != nil {
			return r, rev, err
		}
	}
}

// runsOffQueue: r's latest attempt runs on a fallback tier (a fixed
// worker's exec API, a leader's own worker), which holds no queue message.
func runsOffQueue(r *Record) bool {
	return r.Exec == Running && r.Attempt > 0 && r.Deliveries == 0
}

// offQueueAlive reports whether r's latest attempt runs off the queue and
// showed a sign of life (a record change, an output write) within the
// off-queue silence. An output that cannot be read counts as none.
func (l *Lifecycle) offQueueAlive(ctx context.Context, r *Record) bool {
	if !runsOffQueue(r) {
		return false
	}
	alive := r.Updated
	if o, err := ReadOutput(ctx, l.store, r.ID, false); err == nil && o != nil && o.Attempt == r.Attempt && o.Updated.After(alive) {
		alive = o.Updated
	}
	return l.now().Sub(alive) <= l.offQueueSilence
}

// OffQueue reads task id's record and reports whether its latest attempt
// runs off the queue and is alive (see Start): a worker holding the task's
// queue copy asks it until the task ends or the attempt goes silent.
func (l *Lifecycle) OffQueue(ctx context.Context, id string) (*Record, bool, error) {
	r, err := l.Get(ctx, id)
	if err != nil {
		return nil, false, err
	}
	return r, l.offQueueAlive(ctx, r), nil
}

// fence refuses a step of attempt when the record has moved past it.
func fence(r *Record, attempt int) error {
	switch {
	case r.Exec.Finished():
		return fmt.Errorf("%w: %s", ErrFinished, r.Exec)
	case r.Attempt != attempt:
		return fmt.Errorf("%w: attempt %d, the record is at %d", ErrSuperseded, attempt, r.Attempt)
	case r.Exec != Running:
		return fmt.Errorf("%w: attempt %d is %s", ErrSuperseded, attempt, r.Exec)
	}
	return nil
}

// Finish records attempt's answer as complete: text is the whole answer,
// already in the output bucket under this attempt (the record keeps its
// hash, so the pusher delivers exactly that text); steps are the AI
// backends asked for it (AnsweredBy, Backends). ErrSuperseded or
// ErrFinished (canceled meanwhile): the answer is not this task's.
func (l *Lifecycle) Finish(ctx context.Context, id string, attempt int, text string, steps ...BackendStep) (*Record, error) {
	r, rev, err := updateLoop(ctx, l.store.Tasks(), id, nil, 0, l.rules().Finish(attempt, text, steps))
	if err != nil {
		return r, err
	}
	l.noticeAt(r, rev)
	return r, nil
}

// Fail records that attempt failed. With retry, the task goes back to
// queued for another attempt (the caller naks its message); without, it
// is failed for good: its conversation is freed and the user told.
// steps are the AI backends asked for the attempt (Backends).
func (l *Lifecycle) Fail(ctx context.Context, id string, attempt int, reason string, retry bool, steps ...BackendStep) (*Record, error) {
	r, err := l.update(ctx, id, l.rules().Fail(attempt, reason, retry, steps))
	if err != nil || retry {
		return r, err
	}
	l.release(ctx, r, reason)
	l.notice(r)
	return r, nil
}

// GiveUp fails a task that can never run again, whoever holds it: its
// queue message reached the last delivery (the server's MAX_DELIVERIES
// advisory, the sweep), its execution deadline passed, or a worker was
// stopped on its final delivery. Not fenced: no attempt will finish it.
// A task already finished is left as it is. msg, if not nil, is the
// task's queue message (terminated and removed); otherwise the
// conversation's message is removed if it is this task's.
func (l *Lifecycle) GiveUp(ctx context.Context, id, reason string, msg natsjs.Msg) (*Record, error) {
	r, err := l.update(ctx, id, l.rules().GiveUp(reason))
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		err = nil // a message without a record: still remove it
	}
	if err != nil {
		return r, err
	}
	if msg != nil {
		if err := l.store.GiveUp(ctx, msg, reason); err != nil {
			return r, err
		}
	} else if r != nil {
		l.release(ctx, r, reason)
	}
	if r != nil {
		l.notice(r)
	}
	return r, nil
}

// Refused fails a task refused late: the queue refused it when it was
// forwarded from the spool, or the conversation was busy and the send
// budget held the busy reply back (the pusher sends it; busy marks the
// refusal as an answer). A task already running or finished is left
// alone (a fallback tier ran it, or its first publish was stored after
// all): a refusal never fails a task that is under way or answered.
//
// A task with no record yet is created refused, in one write: a refusal
// is either stored whole or not at all, never left queued (a record
// queued with no queue message would wait for the deadline sweep, which
// then tells the user it failed).
//
// A refusal that cannot be written (the tasks bucket failing, or a
// create racing the record's own that has not landed yet) is owed, as a
// released task's ending is (release.go): this node writes it once the
// bucket answers, so that the user is still told. The error says it was
// not written now.
func (l *Lifecycle) Refused(ctx context.Context, m Message, reason string, busy bool) (*Record, error) {
	how := endRefused
	if busy {
		how = endRefusedBusy
	}
	return l.refusedOrOwed(ctx, m, reason, how)
}

// RefusedSaying is Refused for a refusal whose words the user is owed:
// text is what the inbound path would have replied (why a message's files
// were not taken) had its connection not closed first. The record keeps
// it (Record.Refusal), and the pusher sends it instead of the failure
// note.
func (l *Lifecycle) RefusedSaying(ctx context.Context, m Message, text string) (*Record, error) {
	return l.refusedOrOwed(ctx, m, text, endRefusedSaying)
}

func (l *Lifecycle) refusedOrOwed(ctx context.Context, m Message, reason string, how ending) (*Record, error) {
	r, err := l.refused(ctx, m, reason, how)
	if err != nil {
		l.owe(m, reason, how, 0)
	}
	return r, err
}

func (l *Lifecycle) refused(ctx context.Context, m Message, reason string, how ending) (*Record, error) {
	busy, saying := how == endRefusedBusy, ""
	if how == endRefusedSaying {
		saying = reason
	}
	// The same change makes a fresh record refused and refuses the one
	// there is.
	change := l.rules().refused(reason, busy, saying)
	fresh := RecordOf(m)
	if err := change(fresh); err != nil {
		return nil, err
	}
	// Open creates it refused, or merges into the record there is (whose
	// execution it leaves alone: the update below decides).
	if _, err := l.Open(ctx, fresh); err != nil {
		return nil, err
	}
	r, err := l.update(ctx, m.TaskID, change)
	if err == nil && r.Exec == Failed {
		l.notice(r)
	}
	return r, err
}

// Cancel stops a task in any unfinished state (/stop and `botctl tasks
// cancel` are this one operation): the record says canceled, the worker
// running it is told to stop, its conversation is freed, and the pusher
// tells the user. ErrFinished: nothing to cancel.
func (l *Lifecycle) Cancel(ctx context.Context, id, reason string) (*Record, error) {
	r, err := l.update(ctx, id, l.rules().Cancel(reason))
	if err != nil {
		return r, err
	}
	if err := l.announce(l.store.Names().CancelSubject(id), nil); err != nil {
		l.log.Warn().Err(err).Str("task", id).Msg("cancel not announced; the worker notices within seconds")
	}
	l.release(ctx, r, reason)
	l.notice(r)
	return r, nil
}

// FreeConversation removes the conversation's queue message if it is r's:
// for a task finished off the queue (a fallback tier) while a copy of it
// waits in the queue, which would otherwise hold the conversation until a
// worker pulls it and finds it finished.
func (l *Lifecycle) FreeConversation(ctx context.Context, r *Record, reason string) {
	l.release(ctx, r, reason)
}

// release removes the conversation's queue message if it is r's: the
// conversation takes a new question at once.
func (l *Lifecycle) release(ctx context.Context, r *Record, reason string) {
	msg, err := l.store.ConversationTask(ctx, r.Bot, r.Chat)
	if err != nil || msg == nil {
		if err != nil {
			l.log.Warn().Err(err).Str("task", r.ID).Msg("conversation not freed; the sweep retries")
		}
		return
	}
	var m Message
	if json.Unmarshal(msg.Data, &m) != nil || m.TaskID != r.ID {
		return // another task's
	}
	if err := l.store.RemoveTask(ctx, msg.Sequence); err != nil {
		l.log.Warn().Err(err).Str("task", r.ID).Msg("conversation not freed; the sweep retries")
		return
	}
	l.log.Info().Str("task", r.ID).Str("bot", r.Bot).Str("chat", r.Chat).Uint64("seq", msg.Sequence).Str("reason", reason).Msg("conversation freed")
}

// Retry runs a finished task again (an operator's `botctl tasks retry`):
// its output is dropped, the record queued with delivery reopened (the
// new answer goes by push: the old req_id is spent), and a new queue
// message published. ErrNotFinished, ErrConversationBusy: nothing done.
func (l *Lifecycle) Retry(ctx context.Context, id, reason string) (*Record, error) {
	r, _, err := Get(ctx, l.store.Tasks(), id)
	if err != nil {
		return nil, err
	}
	if !r.Exec.Finished() {
		return r, fmt.Errorf("%w: task %s is %s", ErrNotFinished, id, r.Exec)
	}
	if msg, err := l.store.ConversationTask(ctx, r.Bot, r.Chat); err != nil {
		return r, err
	} else if msg != nil {
		return r, fmt.Errorf("%w: %s", ErrConversationBusy, r.Chat)
	}
	for _, kv := range []natsjs.KeyValue{l.store.Output(), l.store.Progress()} {
		if err := kv.Purge(ctx, id); err != nil && !errors.Is(err, natsjs.ErrKeyNotFound) {
			return r, fmt.Errorf("retry task %s: drop old output: %w", id, err)
		}
	}
	// The record first (a worker that pulls the task must find it queued,
	// not finished), then the queue.
	r, err = l.update(ctx, id, l.rules().Retry(id, reason))
	if err != nil {
		return r, err
	}
	if err := l.store.MarkUndelivered(ctx, r.Bot, r.ID); err != nil {
		return r, err
	}
	raw, _ := schema.Marshal(MessageOf(r))
	msgid := fmt.Sprintf("%s#retry-%d", r.MsgID, l.now().UnixNano())
	if _, err := l.store.PublishTask(ctx, r.Bot, r.Chat, msgid, raw); err != nil {
		why := "retry not queued: " + err.Error()
		l.update(context.WithoutCancel(ctx), id, l.rules().RetryNotQueued(why))
		return r, fmt.Errorf("retry task %s: %w (the task is marked failed; retry again)", id, err)
	}
	l.notice(r)
	return r, nil
}

// reopen moves the delivery back to pending (an operator's retry or
// redeliver), from wherever it is.
func (r *Record) reopen(reason, node string, now time.Time) error {
	if r.Delivery == Pending {
		return nil
	}
	return r.SetDelivery(Pending, reason, node, now)
}

// Redeliver delivers a finished task's ending again, by push (after a
// failed or doubtful delivery): the complete answer, or the note that it
// failed or was stopped. ErrNotFinished: retry or cancel it instead.
func (l *Lifecycle) Redeliver(ctx context.Context, id, reason string) (*Record, error) {
	r, err := l.update(ctx, id, l.rules().Redeliver(id, reason))
	if err != nil {
		return r, err
	}
	if err := l.store.MarkUndelivered(ctx, r.Bot, r.ID); err != nil {
		return r, err
	}
	l.notice(r)
	return r, nil
}

// ExecDone is when r's execution reached its current final state (zero if
// it is not final).
func (r *Record) ExecDone() time.Time {
	if !r.Exec.Finished() {
		return time.Time{}
	}
	for i := len(r.Transitions) - 1; i >= 0; i-- {
		if t := r.Transitions[i]; t.Dim == "exec" && t.To == string(r.Exec) {
			return t.At
		}
	}
	return r.Updated
}
