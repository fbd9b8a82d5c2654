// Package task is the task record: one user question, its raw WeCom
// context, and where it is in two dimensions, execution (is the answer
// computed?) and delivery (has the user seen it?), with every transition's
// time and reason. Records live in the JetStream KV bucket of tasks and are
// changed only by the Lifecycle's operations, each one compare-and-set
// step, so concurrent writers (the leader's inbound, a worker, the pusher,
// the sweep, an operator) never lose each other's changes, and every
// change is one of a few named steps.
package task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/schema"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Exec is the execution dimension.
type Exec string

const (
	Queued    Exec = "queued"
	Running   Exec = "running"
	Succeeded Exec = "succeeded"
	Failed    Exec = "failed"
	Canceled  Exec = "canceled"
)

// Delivery is the delivery dimension.
type Delivery string

const (
	Pending        Delivery = "pending"
	Streaming      Delivery = "streaming"
	Truncated      Delivery = "truncated" // the stream window closed; the full answer is owed by push
	Delivered      Delivery = "delivered"
	DeliveryFailed Delivery = "failed"
)

// Finished reports whether e is final (until an operator retries).
func (e Exec) Finished() bool { return e == Succeeded || e == Failed || e == Canceled }

// Finished reports whether d is final (until an operator redelivers).
func (d Delivery) Finished() bool { return d == Delivered || d == DeliveryFailed }

var execNext = map[Exec][]Exec{
	Queued:    {Running, Failed, Canceled},
	Running:   {Running, Succeeded, Failed, Canceled, Queued}, // Running→Running: a retry attempt; →Queued: released for redelivery
	Succeeded: {Queued},                                       // operator retry
	Failed:    {Queued},
	Canceled:  {Queued},
}

var deliveryNext = map[Delivery][]Delivery{
	Pending:        {Streaming, Truncated, Delivered, DeliveryFailed},
	Streaming:      {Truncated, Delivered, DeliveryFailed, Pending}, // →Pending: operator retry or redeliver
	Truncated:      {Delivered, DeliveryFailed, Pending},
	Delivered:      {Pending}, // operator redeliver
	DeliveryFailed: {Pending},
}

// ErrTransition is a state change the model does not allow.
var ErrTransition = errors.New("task: transition not allowed")

// StoreFailed reports whether err, from a lifecycle operation or a read or
// write of the task, output or context bucket, is JetStream failing
// (unreachable, a timeout, an API error) rather than an answer: a
// record a newer botctl wrote (schema.ErrNewer), a
// lifecycle sentinel (the task finished, superseded, busy, a transition
// not allowed, nothing to change), a key not found, a value that does not
// decode, or the caller's own context canceled. The pusher and the worker
// count the first kind as NATS errors, never the second.
func StoreFailed(err error) bool {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, natsjs.ErrKeyNotFound),
		errors.Is(err, ErrFinished), errors.Is(err, ErrNotFinished), errors.Is(err, ErrSuperseded),
		errors.Is(err, ErrConversationBusy), errors.Is(err, ErrTransition), errors.Is(err, ErrNoChange),
		errors.Is(err, ErrPushSuperseded), errors.Is(err, ErrCorruptRecord), errors.Is(err, ErrRunningOffQueue),
		errors.Is(err, schema.ErrNewer),
		errors.As(err, &syntax), errors.As(err, &typ):
		return false
	}
	return true
}

// SendWindow and MaxRecentSends bound Record.RecentSends: WeCom's quota
// window, and more sends than any budget allows in it.
const (
	SendWindow     = time.Minute
	MaxRecentSends = 32
)

// Sent records a frame sent at t in RecentSends, forgetting those older
// than SendWindow.
func (r *Record) Sent(t time.Time) {
	keep := r.RecentSends[:0:0]
	for _, s := range r.RecentSends {
		if t.Sub(s) < SendWindow {
			keep = append(keep, s)
		}
	}
	keep = append(keep, t)
	if n := len(keep); n > MaxRecentSends {
		keep = keep[n-MaxRecentSends:]
	}
	r.RecentSends = keep
}

// MaxTransitions bounds the history kept in a record.
const MaxTransitions = 64

// Transition is one change of one dimension.
type Transition struct {
	At     time.Time `json:"at"`
	Dim    string    `json:"dim"` // "exec" or "delivery"
	From   string    `json:"from"`
	To     string    `json:"to"`
	Reason string    `json:"reason,omitempty"`
	Node   string    `json:"node,omitempty"`
}

// Record is one task.
type Record struct {
	ID string `json:"id"`

	// The raw message context, persisted before dispatch.
	Bot      string    `json:"bot"`
	MsgID    string    `json:"msgid"`
	ReqID    string    `json:"req_id"`
	TermRev  int64     `json:"term"` // the leader term (election revision) whose connection received the callback
	Chat     string    `json:"chat"` // the conversation: user id (single) or chat id (group)
	ChatType string    `json:"chat_type"`
	User     string    `json:"user"`
	Question string    `json:"question"`
	StreamID string    `json:"stream_id"`
	Received time.Time `json:"received"`
	// Attachments are the files the user sent with the question (images,
	// files, videos, quoted ones too), stored in the media bucket at
	// receipt; none for a text message.
	Attachments []Attachment `json:"attachments,omitempty"`
	// ReceivingUntil: the record was written before the message's files
	// were taken (receiving.go), and they are taken by this time or not
	// at all. While the task is not dispatched (Receiving), nothing
	// delivers it; past this time and ReceivingGrace, the sweep gives it
	// up and its user is told.
	ReceivingUntil time.Time `json:"receiving_until,omitzero"`
	// Late: the message was missed (no connection held the bot, or the
	// leader that read it died) and found by the gap backfill; the answer
	// is pushed with a note that it is late.
	Late bool `json:"late,omitempty"`
	// Incomplete: the conversation was marked "may be incomplete" (a gap
	// backfill could not answer every message it missed); this answer
	// tells the user, with the reason.
	Incomplete string `json:"incomplete,omitempty"`
	// Busy: the task failed as a busy refusal decided late (forwarded
	// from a spool after an outage, it found the conversation's earlier
	// task still running): its answer is the busy reply, not a failure.
	Busy bool `json:"busy,omitempty"`
	// Refusal: the task failed as a refusal whose words the user is owed
	// (why the message's files were not taken, when the connection that
	// read it closed before the reply): its answer is this text, not a
	// failure.
	Refusal string `json:"refusal,omitempty"`
	// NotIndexed: the record was written but its entry in the undelivered
	// index was not (that bucket failed). The next Start writes the entry
	// and clears it: without the entry a new leader's pusher would never
	// find the task after a failover.
	NotIndexed bool `json:"not_indexed,omitempty"`
	// Click: the task answers a click on a card of another task's answer
	// (click.go); its answer is pushed, there is no stream to reply on.
	Click *Click `json:"click,omitempty"`

	Exec     Exec     `json:"exec"`
	Delivery Delivery `json:"delivery"`
	Attempt  int      `json:"attempt"`
	Node     string   `json:"node,omitempty"` // the worker running or last running it
	Tier     string   `json:"tier,omitempty"` // dispatch tier: queue, fixed, local
	Error    string   `json:"error,omitempty"`
	// Started is when the first attempt began: the execution deadline
	// counts from it. Deliveries is the queue's delivery count at the
	// latest attempt (0 off the queue).
	Started    time.Time `json:"started,omitzero"`
	Deliveries int       `json:"deliveries,omitempty"`
	// AnswerHash and AnswerBytes identify the complete answer of the
	// attempt that succeeded: the pusher delivers exactly that text.
	AnswerHash  string `json:"answer_hash,omitempty"`
	AnswerBytes int    `json:"answer_bytes,omitempty"`
	// AnsweredBy is the AI backend whose text is the answer of the
	// attempt that ended last (its Name); Backends is every backend asked
	// or skipped for each attempt, in order, and why (backends.go).
	AnsweredBy string        `json:"answered_by,omitempty"`
	Backends   []BackendStep `json:"backends,omitempty"`
	// Usage is the tokens the backend reported for the task's answers,
	// every attempt's (usage.go); nil: none reported.
	Usage *Usage `json:"usage,omitempty"`

	// Delivery bookkeeping (the pusher's). StreamStart is when the stream's
	// first frame (the receipt) was accepted: WeCom's window counts from it.
	// PushedHash and PushedAt say what the user last saw and when, so a new
	// leader does not resend it; RecentSends, what the conversation's quota
	// window holds. A stream's progress frames are written every few
	// seconds, not each (pkg/pusher's shownWriteEvery, 10 s): the three may
	// be that far behind, and a new leader counts the frames that may be
	// missing as sent. PushedParts counts the parts of the full
	// answer already pushed (aibot_send_msg), so a new leader resumes after
	// them; PushRound counts the times it was reset (Retry, Redeliver), so
	// that a count written for an earlier push is refused (PartPushed).
	StreamStart  time.Time `json:"stream_start,omitzero"`
	PushedHash   string    `json:"pushed_hash,omitempty"`
	PushedAt     time.Time `json:"pushed_at,omitzero"`
	PushedParts  int       `json:"pushed_parts,omitempty"`
	PushRound    int       `json:"push_round,omitempty"`
	PushAttempts int       `json:"push_attempts,omitempty"`
	FinalPending bool      `json:"final_pending,omitempty"` // a final frame was sent and its outcome not yet recorded
	// RecentSends are the times of the frames sent for this task within
	// the last SendWindow (at most MaxRecentSends): a new leader counts
	// them in the conversation's budget, so that two leaders together
	// stay under WeCom's per-conversation quota.
	RecentSends    []time.Time `json:"recent_sends,omitempty"`
	DeliveryReason string      `json:"delivery_reason,omitempty"`

	Updated     time.Time    `json:"updated"`
	Transitions []Transition `json:"transitions"`
	// Feedback is the user's verdict on the answer, if they gave one.
	Feedback *Feedback `json:"feedback,omitempty"`
}

// Attachment is one file a user sent: what it is, and where its bytes
// are (the media bucket's object Key, jetstream.Store.Media).
type Attachment struct {
	Kind string `json:"kind"` // "image", "file" or "video"
	Name string `json:"name,omitempty"`
	MIME string `json:"mime,omitempty"`
	Size int64  `json:"size"`
	// Width and Height are an image's pixel size (0 when not decodable).
	Width  int `json:"width,omitempty"`
	Height int `json:"height,omitempty"`
	// Quoted: the file is part of the message the user quoted.
	Quoted bool   `json:"quoted,omitempty"`
	Key    string `json:"key"`
}

// ID derives a task's id from its bot and WeCom msgid: the same callback
// always maps to the same task, so a duplicate callback finds its task.
func ID(bot, msgid string) string {
	h := sha256.Sum256([]byte(bot + "\x00" + msgid))
	return "t_" + hex.EncodeToString(h[:12])
}

// New is a queued, pending task.
func New(bot, msgid string, now time.Time) *Record {
	return &Record{ID: ID(bot, msgid), Bot: bot, MsgID: msgid, Received: now, Exec: Queued, Delivery: Pending, Updated: now}
}

// SetExec moves the execution dimension, recording why.
func (r *Record) SetExec(to Exec, reason, node string, now time.Time) error {
	if !allowed(execNext[r.Exec], to) {
		return fmt.Errorf("%w: task %s exec %s → %s", ErrTransition, r.ID, r.Exec, to)
	}
	r.record(Transition{At: now, Dim: "exec", From: string(r.Exec), To: string(to), Reason: reason, Node: node})
	r.Exec = to
	return nil
}

// SetDelivery moves the delivery dimension, recording why.
func (r *Record) SetDelivery(to Delivery, reason, node string, now time.Time) error {
	if !allowed(deliveryNext[r.Delivery], to) {
		return fmt.Errorf("%w: task %s delivery %s → %s", ErrTransition, r.ID, r.Delivery, to)
	}
	r.record(Transition{At: now, Dim: "delivery", From: string(r.Delivery), To: string(to), Reason: reason, Node: node})
	r.Delivery = to
	return nil
}

func (r *Record) record(t Transition) {
	r.Updated = t.At
	r.Transitions = append(r.Transitions, t)
	if n := len(r.Transitions); n > MaxTransitions {
		r.Transitions = append(r.Transitions[:0:0], r.Transitions[n-MaxTransitions:]...)
	}
}

func allowed[T comparable](next []T, to T) bool {
	for _, n := range next {
		if n == to {
			return true
		}
	}
	return false
}

// The kinds of record this package refuses when a newer botctl wrote them
// (schema.Check).
const (
	KindRecord       = "task record"
	KindMessage      = "task message"
	KindOutput       = "task output"
	KindConversation = "conversation context"
)

// ErrCorruptRecord: the bucket holds a value under the task's key that is
// not a record. The task exists; what it says is unknown.
var ErrCorruptRecord = errors.New("corrupt record")

// Get reads a record and its KV revision. Errors wrap the bucket's
// (jetstream.ErrKeyNotFound: no such task), ErrCorruptRecord, or
// schema.ErrNewer: a record a newer botctl wrote, which no step of this
// node reads further or writes over (every change goes through Get).
func Get(ctx context.Context, kv natsjs.KeyValue, id string) (*Record, uint64, error) {
	e, err := kv.Get(ctx, id)
	if err != nil {
		return nil, 0, fmt.Errorf("task %s: %w", id, err)
	}
	if err := schema.Check(KindRecord, e.Value()); err != nil {
		return nil, 0, fmt.Errorf("task %s: %w", id, err)
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, 0, fmt.Errorf("task %s: %w: %w", id, ErrCorruptRecord, err)
	}
	return &r, e.Revision(), nil
}

// create stores a new record; jetstream.ErrKeyExists if the task exists.
func create(ctx context.Context, kv natsjs.KeyValue, r *Record) (uint64, error) {
	raw, err := schema.Marshal(r)
	if err != nil {
		return 0, err
	}
	rev, err := kv.Create(ctx, r.ID, raw)
	if err != nil {
		return 0, fmt.Errorf("create task %s: %w", r.ID, err)
	}
	return rev, nil
}

// clone is a copy of r that shares nothing a step may change.
func (r *Record) clone() *Record {
	c := *r
	c.RecentSends = slices.Clone(r.RecentSends)
	c.Attachments = slices.Clone(r.Attachments)
	c.Transitions = slices.Clone(r.Transitions)
	c.Backends = slices.Clone(r.Backends)
	if r.Feedback != nil {
		fb := *r.Feedback
		fb.Reasons = slices.Clone(fb.Reasons)
		fb.MsgIDs = slices.Clone(fb.MsgIDs)
		c.Feedback = &fb
	}
	return &c
}

// ErrNoChange, returned by an Update function, leaves the record as it is.
var ErrNoChange = errors.New("task: no change")

// updateFrom is update starting from cur, the record as the caller read
// it at revision rev: if nobody wrote it since, the write needs no read
// first (one bucket round trip instead of two); if somebody did, the CAS
// fails and update starts over from a fresh read. cur is not changed.
func updateFrom(ctx context.Context, kv natsjs.KeyValue, cur *Record, rev uint64, fn func(*Record) error) (*Record, error) {
	r, _, err := updateFromRev(ctx, kv, cur, rev, fn)
	return r, err
}

// updateFromRev is updateFrom that also returns the record's revision
// after it (the one read, when fn changed nothing), so that a caller can
// chain a next update without a read.
func updateFromRev(ctx context.Context, kv natsjs.KeyValue, cur *Record, rev uint64, fn func(*Record) error) (*Record, uint64, error) {
	if cur == nil || rev == 0 {
		return nil, 0, fmt.Errorf("update task: no record read to start from")
	}
	return updateLoop(ctx, kv, cur.ID, cur.clone(), rev, fn)
}

// update applies fn to the current record and stores it only if nobody
// changed it meanwhile, retrying on conflict. fn may run several times;
// it returns ErrNoChange to stop without writing.
func update(ctx context.Context, kv natsjs.KeyValue, id string, fn func(*Record) error) (*Record, error) {
	r, _, err := updateLoop(ctx, kv, id, nil, 0, fn)
	return r, err
}

// updateLoop is update and updateFrom: r, if not nil, is the record at
// rev for the first try; every retry reads it afresh. It returns the
// record and its revision after the update (as read, when fn changed
// nothing).
func updateLoop(ctx context.Context, kv natsjs.KeyValue, id string, r *Record, rev uint64, fn func(*Record) error) (*Record, uint64, error) {
	given := r != nil
	for attempt := 0; ; attempt++ {
		if attempt > 0 || !given {
			var err error
			if r, rev, err = Get(ctx, kv, id); err != nil {
				return nil, 0, err
			}
		}
		if err := fn(r); err != nil {
			if errors.Is(err, ErrNoChange) {
				return r, rev, nil
			}
			return r, rev, err
		}
		raw, err := schema.Marshal(r)
		if err != nil {
			return nil, 0, err
		}
		if next, err := kv.Update(ctx, id, raw, rev); err == nil {
			return r, next, nil
		} else if !jetstream.LostCAS(err) || attempt >= 50 {
			return nil, 0, fmt.Errorf("update task %s: %w", id, err)
		}
		if attempt > 0 || !given { // the caller's copy was stale: read again at once
			jetstream.CASPause(ctx, attempt)
		}
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
	}
}
