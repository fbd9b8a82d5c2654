package task

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Lifecycle is the one owner of task records: every change of a record,
// by the leader's inbound path, a worker, the pusher, the sweep or an
// operator, is one of its operations, each a single compare-and-set step
// on the record (retried on conflict) followed by what the step implies
// for the queue (a conversation freed) and for the others (a worker told
// to stop, the pusher woken). Nothing else writes the task bucket.
//
// The record is the only truth of where a task is: "the answer is over"
// is Exec.Finished(), never a flag in the output. The output bucket holds
// text, and whose attempt wrote it.
//
// Attempts are fenced. Start hands out the next attempt number; Finish
// and Fail take it back and refuse (ErrSuperseded) when a later Start has
// taken the task over, and so does the attempt's output writer. Two runs
// of one task at once (a publish that timed out but was stored plus a
// fallback tier, a redelivery while a slow worker is still alive) can
// therefore not both finish it, nor interleave their text: the newer one
// wins, the older one stops at its next write.
type Lifecycle struct {
	store *jetstream.Store
	node  string
	now   func() time.Time
	log   zerolog.Logger
	quiet bool // announce nothing (tests of the paths that survive a lost announcement)
	// offQueueSilence: see WithOffQueueSilence.
	offQueueSilence time.Duration
}

// Sentinel errors of the lifecycle; check with errors.Is.
var (
	// ErrFinished: the task's execution is over (succeeded, failed or
	// canceled); Start, Cancel and attempt steps change nothing. A worker
	// acks its message and moves on.
	ErrFinished = errors.New("task: already finished")
	// ErrNotFinished: Retry and Redeliver need a finished task; cancel it
	// first.
	ErrNotFinished = errors.New("task: not finished")
	// ErrSuperseded: a later attempt has taken the task over. The caller
	// must stop and write nothing more, and must not ack, nak or
	// terminate its queue message: the newer attempt holds it.
	ErrSuperseded = errors.New("task: superseded by a later attempt")
	// ErrConversationBusy: Retry found another task in the conversation.
	ErrConversationBusy = errors.New("task: conversation has a task queued or running")
	// ErrRunningOffQueue: Start, for a queue delivery, found the task's
	// latest attempt running off the queue (on a fallback tier) and alive.
	// Nothing was changed. The worker keeps the queue message, which holds
	// the conversation, until the task ends (see OffQueue).
	ErrRunningOffQueue = errors.New("task: running off the queue")
)

// DefaultOffQueueSilence is how long an attempt off the queue may show no
// sign of life before a queue delivery takes the task over (see
// WithOffQueueSilence).
const DefaultOffQueueSilence = 2 * time.Minute

// NewLifecycle is the lifecycle of store's tasks, acting as node (the
// name written in every transition: a node id, or "botctl" for the CLI).
func NewLifecycle(store *jetstream.Store, node string, log zerolog.Logger) *Lifecycle {
	return &Lifecycle{store: store, node: node, now: time.Now, log: log.With().Str("component", "lifecycle").Logger(),
		offQueueSilence: DefaultOffQueueSilence}
}

// WithOffQueueSilence returns a copy of l on which an attempt off the
// queue counts as alive while its record or its output changed within d
// (default DefaultOffQueueSilence). Past it, its node is presumed dead
// with it, and a queue delivery of the task takes it over; the old
// attempt, if it lives after all, is fenced off (ErrSuperseded), so the
// cost of presuming too soon is work done twice, never a second answer.
func (l *Lifecycle) WithOffQueueSilence(d time.Duration) *Lifecycle {
	c := *l
	c.offQueueSilence = d
	return &c
}

// WithClock returns a copy of l that reads time from now (tests).
func (l *Lifecycle) WithClock(now func() time.Time) *Lifecycle {
	c := *l
	c.now = now
	return &c
}

// Quiet returns a copy of l that announces nothing on core NATS: no
// cancel to workers, no notice to the pusher. For tests of the paths that
// must work when an announcement is lost (the periodic re-reads).
func (l *Lifecycle) Quiet() *Lifecycle {
	c := *l
	c.quiet = true
	return &c
}

func (l *Lifecycle) announce(subject string, data []byte) error {
	if l.quiet {
		return nil
	}
	return l.store.JetStream().Conn().Publish(subject, data)
}

// Get reads a task's record.
func (l *Lifecycle) Get(ctx context.Context, id string) (*Record, error) {
	r, _, err := Get(ctx, l.store.Tasks(), id)
	return r, err
}

func (l *Lifecycle) update(ctx context.Context, id string, fn func(*Record) error) (*Record, error) {
	return update(ctx, l.store.Tasks(), id, fn)
}

// NoticeSubject is where changes the leader's pusher must act on at once
// (an execution that ended, a delivery reopened) are announced, per bot,
// with the task id as the body. Core NATS, no storage: the pusher re-reads
// every active record now and then, so a lost notice only costs latency.
func NoticeSubject(bot string) string { return "botctl.notice." + jetstream.EncodeToken(bot) }

// CancelSubject is where a task's cancellation is announced (core NATS):
// every worker listens, and the one running it stops at once. The record
// says canceled first; workers also re-read it now and then.
func CancelSubject(taskID string) string { return cancelPrefix + jetstream.EncodeToken(taskID) }

const cancelPrefix = "botctl.cancel."

// CancelSubjects matches every CancelSubject.
const CancelSubjects = cancelPrefix + "*"

// CanceledTask is the task id of a CancelSubject.
func CanceledTask(subject string) (string, bool) {
	tok, ok := strings.CutPrefix(subject, cancelPrefix)
	if !ok {
		return "", false
	}
	id, err := jetstream.DecodeToken(tok)
	return id, err == nil
}

func (l *Lifecycle) notice(r *Record) { l.noticeAt(r, 0) }

// Headers of a notice that carries the record as written and its
// revision (the body stays the task id, which every pusher reads).
const (
	noticeRecordHeader = "Botctl-Record" // the record's JSON, base64 (std)
	noticeRevHeader    = "Botctl-Rev"
)

// noticeAt announces r, written at revision rev (0: unknown), with the
// record when rev is known: the pusher then steps the ending with no read
// of its own, one JetStream round trip less between the complete answer
// and the final frame.
func (l *Lifecycle) noticeAt(r *Record, rev uint64) {
	if l.quiet {
		return
	}
	if err := l.store.JetStream().Conn().PublishMsg(NoticeMsg(r, rev)); err != nil {
		l.log.Debug().Err(err).Str("task", r.ID).Msg("notice not published; the pusher finds the change on its next read")
	}
}

// NoticeMsg is the notice of r, written at revision rev: the task id as
// its body and, when rev is known (not 0), the record and its revision
// in headers (NoticeOf reads them; a pusher that does not ignores them).
func NoticeMsg(r *Record, rev uint64) *nats.Msg {
	m := nats.NewMsg(NoticeSubject(r.Bot))
	m.Data = []byte(r.ID)
	if rev > 0 {
		if raw, err := json.Marshal(r); err == nil {
			m.Header.Set(noticeRecordHeader, base64.StdEncoding.EncodeToString(raw))
			m.Header.Set(noticeRevHeader, strconv.FormatUint(rev, 10))
		}
	}
	return m
}

// NoticeOf reads a notice (NoticeSubject): the task id, and the record as
// written at revision rev when the notice carries it (nil, 0: read it). A
// record whose header does not decode, or names another task, is ignored.
func NoticeOf(m *nats.Msg) (id string, r *Record, rev uint64) {
	id = string(m.Data)
	if m.Header == nil {
		return id, nil, 0
	}
	raw, err := base64.StdEncoding.DecodeString(m.Header.Get(noticeRecordHeader))
	if err != nil || len(raw) == 0 {
		return id, nil, 0
	}
	rev, err = strconv.ParseUint(m.Header.Get(noticeRevHeader), 10, 64)
	if err != nil || rev == 0 {
		return id, nil, 0
	}
	var rec Record
	if err := json.Unmarshal(raw, &rec); err != nil || rec.ID != id {
		return id, nil, 0
	}
	return id, &rec, rev
}

// Open records a task: the leader's inbound path after dispatch (with the
// receipt, if it was sent), a worker that pulled a task whose record has
// not landed yet, a spooled task. Idempotent: when the record exists the
// leader's fields are merged in (its req_id, term, stream and tier, and
// the receipt), nothing else changes. Every opened task is in the pending
// index until its delivery is final.
func (l *Lifecycle) Open(ctx context.Context, r *Record) (*Record, error) {
	cur := r
	if _, err := create(ctx, l.store.Tasks(), r); errors.Is(err, natsjs.ErrKeyExists) {
		cur, err = l.update(ctx, r.ID, func(c *Record) error {
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
			if r.Term != 0 && c.Term != r.Term {
				c.Term, changed = r.Term, true
			}
			if r.Late && !c.Late {
				c.Late, changed = true, true
			}
			if !r.StreamStart.IsZero() && c.Delivery == Pending {
				c.PushedHash, c.PushedAt, c.StreamStart = r.PushedHash, r.PushedAt, r.StreamStart
				for _, t := range r.RecentSends {
					c.Sent(t)
				}
				if err := c.SetDelivery(Streaming, "receipt sent", l.node, l.now().UTC()); err != nil {
					return err
				}
				changed = true
			}
			if !changed {
				return ErrNoChange
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	if !cur.Delivery.Finished() {
		if err := l.store.MarkPending(ctx, cur.Bot, cur.ID); err != nil {
			return cur, err
		}
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
	cur, rev, err := Get(ctx, l.store.Tasks(), m.TaskID)
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
	if cur != nil {
		seen = cur.Attempt
	}
	var attempt int
	fn := func(r *Record) error {
		if r.Exec.Finished() {
			return fmt.Errorf("%w: %s", ErrFinished, r.Exec)
		}
		if deliveries > 0 && runsOffQueue(r) && r.Attempt != seen {
			// Started off the queue since the read above: alive.
			return fmt.Errorf("%w: attempt %d on %s (tier %s)", ErrRunningOffQueue, r.Attempt, r.Node, r.Tier)
		}
		now := l.now().UTC()
		why := fmt.Sprintf("attempt %d on %s (tier %s)", r.Attempt+1, l.node, tier)
		if r.Exec == Running {
			why += fmt.Sprintf(", superseding attempt %d on %s", r.Attempt, r.Node)
		}
		if deliveries > 0 {
			why += fmt.Sprintf(", delivery %d", deliveries)
		}
		r.Attempt++
		attempt = r.Attempt
		r.Node, r.Error, r.Deliveries = l.node, "", deliveries
		if r.Tier == "" {
			r.Tier = tier
		}
		if r.Started.IsZero() {
			r.Started = now
		}
		return r.SetExec(Running, why, l.node, now)
	}
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
	if o, err := GetOutput(ctx, l.store.Output(), r.ID); err == nil && o != nil && o.Attempt == r.Attempt && o.Updated.After(alive) {
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
// hash, so the pusher delivers exactly that text). ErrSuperseded or
// ErrFinished (canceled meanwhile): the answer is not this task's.
func (l *Lifecycle) Finish(ctx context.Context, id string, attempt int, text string) (*Record, error) {
	r, rev, err := updateLoop(ctx, l.store.Tasks(), id, nil, 0, func(r *Record) error {
		if err := fence(r, attempt); err != nil {
			return err
		}
		r.AnswerHash, r.AnswerBytes = Hash(text), len(text)
		return r.SetExec(Succeeded, fmt.Sprintf("answer complete, %d bytes", len(text)), l.node, l.now().UTC())
	})
	if err != nil {
		return r, err
	}
	l.noticeAt(r, rev)
	return r, nil
}

// Fail records that attempt failed. With retry, the task goes back to
// queued for another attempt (the caller naks its message); without, it
// is failed for good: its conversation is freed and the user told.
func (l *Lifecycle) Fail(ctx context.Context, id string, attempt int, reason string, retry bool) (*Record, error) {
	r, err := l.update(ctx, id, func(r *Record) error {
		if err := fence(r, attempt); err != nil {
			return err
		}
		r.Error = reason
		if retry {
			return r.SetExec(Queued, fmt.Sprintf("attempt %d failed, will retry: %s", attempt, reason), l.node, l.now().UTC())
		}
		return r.SetExec(Failed, reason, l.node, l.now().UTC())
	})
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
	r, err := l.update(ctx, id, func(r *Record) error {
		if r.Exec.Finished() {
			return ErrNoChange
		}
		r.Error = reason
		return r.SetExec(Failed, reason, l.node, l.now().UTC())
	})
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
func (l *Lifecycle) Refused(ctx context.Context, m Message, reason string, busy bool) (*Record, error) {
	fresh := RecordOf(m)
	fresh.Error, fresh.Busy = reason, busy
	if err := fresh.SetExec(Failed, reason, l.node, l.now().UTC()); err != nil {
		return nil, err
	}
	// Open creates it refused, or merges into the record there is (whose
	// execution it leaves alone: the update below decides).
	if _, err := l.Open(ctx, fresh); err != nil {
		return nil, err
	}
	r, err := l.update(ctx, m.TaskID, func(r *Record) error {
		if r.Exec != Queued || r.Attempt > 0 {
			return ErrNoChange
		}
		r.Error, r.Busy = reason, busy
		return r.SetExec(Failed, reason, l.node, l.now().UTC())
	})
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
	r, err := l.update(ctx, id, func(r *Record) error {
		if r.Exec.Finished() {
			return fmt.Errorf("%w: %s", ErrFinished, r.Exec)
		}
		return r.SetExec(Canceled, reason, l.node, l.now().UTC())
	})
	if err != nil {
		return r, err
	}
	if err := l.announce(CancelSubject(id), nil); err != nil {
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
	if err := l.store.Output().Purge(ctx, id); err != nil && !errors.Is(err, natsjs.ErrKeyNotFound) {
		return r, fmt.Errorf("retry task %s: drop old output: %w", id, err)
	}
	// The record first (a worker that pulls the task must find it queued,
	// not finished), then the queue.
	r, err = l.update(ctx, id, func(r *Record) error {
		if !r.Exec.Finished() {
			return fmt.Errorf("%w: task %s is %s", ErrNotFinished, id, r.Exec)
		}
		now := l.now().UTC()
		r.ReqID, r.Term, r.StreamID, r.Error = "", 0, "", ""
		r.PushedParts, r.PushAttempts, r.PushedHash, r.FinalPending = 0, 0, "", false
		r.AnswerHash, r.AnswerBytes, r.Started = "", 0, time.Time{}
		if err := r.SetExec(Queued, reason, l.node, now); err != nil {
			return err
		}
		if r.Delivery != Pending {
			return r.reopen(reason, l.node, now)
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	if err := l.store.MarkPending(ctx, r.Bot, r.ID); err != nil {
		return r, err
	}
	raw, _ := json.Marshal(MessageOf(r))
	msgid := fmt.Sprintf("%s#retry-%d", r.MsgID, l.now().UnixNano())
	if _, err := l.store.PublishTask(ctx, r.Bot, r.Chat, msgid, raw); err != nil {
		why := "retry not queued: " + err.Error()
		l.update(context.WithoutCancel(ctx), id, func(r *Record) error {
			r.Error = why
			return r.SetExec(Failed, why, l.node, l.now().UTC())
		})
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
	r, err := l.update(ctx, id, func(r *Record) error {
		if !r.Exec.Finished() {
			return fmt.Errorf("%w: task %s is %s", ErrNotFinished, id, r.Exec)
		}
		r.Term, r.ReqID, r.PushedParts, r.PushAttempts, r.FinalPending = 0, "", 0, 0, false
		return r.reopen(reason, l.node, l.now().UTC())
	})
	if err != nil {
		return r, err
	}
	if err := l.store.MarkPending(ctx, r.Bot, r.ID); err != nil {
		return r, err
	}
	l.notice(r)
	return r, nil
}

// Delivery steps: the leader's pusher records what the user has seen.

// Shown records a progress frame (or the receipt) the user now sees:
// its content hash when it changed, and when.
func (l *Lifecycle) Shown(ctx context.Context, id, hash string, at time.Time) (*Record, error) {
	return l.update(ctx, id, l.shown(hash, at))
}

// ShownFrom is Shown starting from r as read at revision rev (task.Get):
// the pusher's step has just read the record, so when nobody wrote it
// since, recording the frame costs one write and no read. It returns the
// record and its revision after the write (the pusher keeps both, and its
// next step needs no read either). r is not changed.
func (l *Lifecycle) ShownFrom(ctx context.Context, r *Record, rev uint64, hash string, at time.Time) (*Record, uint64, error) {
	return updateFromRev(ctx, l.store.Tasks(), r, rev, l.shown(hash, at))
}

func (l *Lifecycle) shown(hash string, at time.Time) func(*Record) error {
	return func(r *Record) error {
		r.PushedAt = at
		r.Sent(at)
		if hash != "" {
			r.PushedHash = hash
		}
		if r.StreamStart.IsZero() {
			r.StreamStart = at
		}
		if r.Delivery == Pending {
			return r.SetDelivery(Streaming, "first frame sent", l.node, at.UTC())
		}
		return nil
	}
}

// FinalIntent records that a final frame is about to be sent, so a new
// leader that finds it without an outcome knows the user may have it.
func (l *Lifecycle) FinalIntent(ctx context.Context, id string) (*Record, error) {
	return l.update(ctx, id, finalIntent)
}

// FinalIntentFrom is FinalIntent starting from r as read at revision rev
// (the pusher's step has just read it): when nobody wrote the record
// since, one write and no read stand between the final answer and its
// frame. It returns the record and its revision after the write, for
// DeliveredFrom. r is not changed.
func (l *Lifecycle) FinalIntentFrom(ctx context.Context, r *Record, rev uint64) (*Record, uint64, error) {
	return updateFromRev(ctx, l.store.Tasks(), r, rev, finalIntent)
}

func finalIntent(r *Record) error {
	if r.FinalPending || r.Delivery.Finished() {
		return ErrNoChange // a finished delivery: the caller sends nothing
	}
	r.FinalPending = true
	return nil
}

// Truncate records that the stream is closed (or unusable) before the
// answer was complete: the complete answer is owed by push.
func (l *Lifecycle) Truncate(ctx context.Context, id, why string) (*Record, error) {
	now := l.now()
	return l.update(ctx, id, func(r *Record) error {
		if r.Delivery == Truncated || r.Delivery.Finished() {
			return ErrNoChange
		}
		r.Sent(now) // the closing frame (counted even if it failed: the safe side)
		r.DeliveryReason = why
		return r.SetDelivery(Truncated, why, l.node, l.now().UTC())
	})
}

// PartPushed records that the first n parts of the pushed answer are acked.
func (l *Lifecycle) PartPushed(ctx context.Context, id string, n int) (*Record, error) {
	now := l.now()
	return l.update(ctx, id, func(r *Record) error {
		r.PushedParts, r.PushAttempts = n, 0
		r.Sent(now)
		return nil
	})
}

// Delivered records that the user has the ending (text, whose hash is
// kept), and takes the task out of the pending index.
func (l *Lifecycle) Delivered(ctx context.Context, id, text, why string, parts int) (*Record, error) {
	r, err := l.update(ctx, id, l.deliver(text, why, parts))
	return l.delivered(ctx, r, err)
}

// DeliveredFrom is Delivered starting from r as read (or written, by
// FinalIntentFrom) at revision rev: no read when nobody wrote it since.
// r is not changed.
func (l *Lifecycle) DeliveredFrom(ctx context.Context, r *Record, rev uint64, text, why string, parts int) (*Record, error) {
	next, err := updateFrom(ctx, l.store.Tasks(), r, rev, l.deliver(text, why, parts))
	return l.delivered(ctx, next, err)
}

func (l *Lifecycle) deliver(text, why string, parts int) func(*Record) error {
	now := l.now()
	return func(r *Record) error {
		if r.Delivery.Finished() {
			return ErrNoChange
		}
		r.PushedHash, r.PushedAt, r.FinalPending, r.DeliveryReason = Hash(text), now, false, why
		r.Sent(now)
		if parts > 0 {
			r.PushedParts = parts
		}
		return r.SetDelivery(Delivered, why, l.node, now.UTC())
	}
}

// delivered takes a delivered task out of the pending index.
func (l *Lifecycle) delivered(ctx context.Context, r *Record, err error) (*Record, error) {
	if err != nil {
		return r, err
	}
	if err := l.store.ClearPending(ctx, r.Bot, r.ID); err != nil {
		l.log.Debug().Err(err).Str("task", r.ID).Msg("pending index not cleared; the next rebuild drops it")
	}
	return r, nil
}

// SendFailed counts a failed send about the task itself (not the
// connection: see wecom); at maxAttempts the delivery fails for good and
// the task leaves the pending index.
func (l *Lifecycle) SendFailed(ctx context.Context, id string, sendErr error, maxAttempts int) (*Record, error) {
	r, err := l.update(ctx, id, func(r *Record) error {
		if r.Delivery.Finished() {
			return ErrNoChange
		}
		r.PushAttempts++
		r.DeliveryReason = sendErr.Error()
		if r.PushAttempts >= maxAttempts {
			return r.SetDelivery(DeliveryFailed, fmt.Sprintf("gave up after %d attempts: %v", r.PushAttempts, sendErr), l.node, l.now().UTC())
		}
		return nil
	})
	if err == nil && r.Delivery == DeliveryFailed {
		l.store.ClearPending(ctx, r.Bot, r.ID)
	}
	return r, err
}

// ExpiredPrefix starts the delivery reason of an answer that expired
// undelivered (Expired).
const ExpiredPrefix = "expired undelivered: "

// Expired fails the delivery of an answer owed by push for longer than
// the replay expiry: sending it that late would confuse more than help.
func (l *Lifecycle) Expired(ctx context.Context, id string, owedFor time.Duration) (*Record, error) {
	r, err := l.update(ctx, id, func(r *Record) error {
		if r.Delivery.Finished() {
			return ErrNoChange
		}
		reason := fmt.Sprintf("%sthe answer was owed for %s, past the replay expiry", ExpiredPrefix, owedFor.Round(time.Second))
		r.DeliveryReason = reason
		return r.SetDelivery(DeliveryFailed, reason, l.node, l.now().UTC())
	})
	if err == nil && r.Delivery == DeliveryFailed {
		l.store.ClearPending(ctx, r.Bot, r.ID)
	}
	return r, err
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

// Forget takes a task out of bot's pending index (its record expired, or
// its delivery is final and the index entry was left behind).
func (l *Lifecycle) Forget(ctx context.Context, bot, id string) error {
	return l.store.ClearPending(ctx, bot, id)
}
