package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/botctl/botctl/pkg/pause"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Errors of PublishTask, checked with errors.Is. Exactly one of them, or
// none (success, duplicate), or the caller's own context.Canceled, is
// matched by an error from PublishTask.
var (
	// ErrConversationBusy: the conversation already has a task queued or
	// running, and the server refused the new one. This is an answer, not a
	// failure: tell the user, and never retry the task on another tier or
	// run it locally.
	ErrConversationBusy = errors.New("conversation already has a task queued or running")

	// ErrUnavailable: JetStream did not confirm the task (server down or
	// unreachable, no responders, timeout, stream offline or without
	// quorum). The task may or may not be stored: fall back (spool, another
	// tier) and republish later with the same msgid; the duplicate window
	// makes that safe.
	ErrUnavailable = errors.New("jetstream unavailable")

	// ErrTaskRejected: JetStream answered and refused this task for a reason
	// that retrying will not change (too large, subject bound to another
	// stream, a configuration error). Record the task as failed; do not
	// fall back.
	ErrTaskRejected = errors.New("jetstream rejected the task")
)

// busyDescription is the description nats-server gives a publish refused
// by MaxMsgsPerSubject with DiscardNewPerSubject (server/store.go,
// ErrMaxMsgsPerSubject). The error code alone does not identify it:
// JSStreamStoreFailedF (10077) is the server's generic "storing failed"
// error and also carries "store is closed" (a stream shutting down),
// "maximum messages exceeded", "maximum bytes exceeded" and "message too
// large", all with code 503.
const busyDescription = "maximum messages per subject exceeded"

// tooLargeDescription is nats-server's ErrMsgTooLarge, also 10077 and 503,
// but final: the same task will never fit.
const tooLargeDescription = "message too large"

// errCodeStoreFailed is nats-server's JSStreamStoreFailedF; nats.go has no
// constant for it.
const errCodeStoreFailed natsjs.ErrorCode = 10077

// errCodeMsgIDInProcess is nats-server's JSStreamDuplicateMessageConflict
// (409, "duplicate message id is in process"): a publish with the msgid
// of one whose store is still being decided.
const errCodeMsgIDInProcess natsjs.ErrorCode = 10158

// PublishResult is JetStream's acknowledgement of a published task.
type PublishResult struct {
	// Seq is the task's sequence in the task stream. For a duplicate it is
	// the sequence the server reports for the original (may be 0).
	Seq uint64
	// Duplicate is true when the msgid was already published within the
	// duplicate window: the task was not queued again.
	Duplicate bool
}

// PublishTask queues a task for conversation of bot, with msgid (the WeCom
// msgid) as the message id and payload as the body. It returns:
//
//   - PublishResult{Seq: n} and nil: queued;
//   - PublishResult{Duplicate: true} and nil: msgid was already published
//     within the duplicate window (whether or not that task is still queued);
//   - an error matching ErrConversationBusy: the conversation already has a
//     task; the server refused this one (nothing was stored);
//   - an error matching ErrUnavailable: no confirmation; fall back;
//   - an error matching ErrTaskRejected: a final refusal for this task;
//   - the caller's context.Canceled.
//
// A busy conversation is never reported as ErrUnavailable, although the
// server gives both the code 503: see busyDescription.
//
// The stored message keeps msgid in its Nats-Msg-Id header.
func (s *Store) PublishTask(ctx context.Context, bot, conversation, msgid string, payload []byte) (PublishResult, error) {
	if msgid == "" {
		return PublishResult{}, fmt.Errorf("publish task of bot %s conversation %s: %w: empty msgid (the duplicate window needs it)", bot, conversation, ErrTaskRejected)
	}
	subj := s.names.TaskSubject(bot, conversation)
	ack, err := s.js.Publish(ctx, subj, payload,
		natsjs.WithMsgID(msgid),
		// A subject captured by another stream would take our tasks
		// somewhere no worker reads: refuse instead.
		natsjs.WithExpectStream(s.names.TaskStream))
	if err != nil {
		return PublishResult{}, fmt.Errorf("publish task %s of bot %s conversation %s: %w", msgid, bot, conversation, classify(ctx, err))
	}
	return PublishResult{Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// classify maps a publish error to ErrConversationBusy, ErrTaskRejected,
// ErrUnavailable or the caller's cancellation, keeping err in the chain.
func classify(ctx context.Context, err error) error {
	var apiErr *natsjs.APIError
	if errors.As(err, &apiErr) {
		switch {
		case apiErr.ErrorCode == errCodeStoreFailed && apiErr.Description == busyDescription:
			return fmt.Errorf("%w (%w)", ErrConversationBusy, err)
		case apiErr.ErrorCode == errCodeStoreFailed && apiErr.Description == tooLargeDescription:
			return fmt.Errorf("%w: %w", ErrTaskRejected, err)
		case apiErr.ErrorCode == errCodeMsgIDInProcess:
			// The same msgid's earlier publish is still being stored:
			// it may land or not, so this is no answer yet. A later
			// publish gets its duplicate ack, or stores the task.
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		case apiErr.Code >= 500:
			// Store closed, no quorum, not the leader, JetStream off: the
			// server is there but cannot store now.
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		default: // 4xx: this request will never be accepted
			return fmt.Errorf("%w: %w", ErrTaskRejected, err)
		}
	}
	switch {
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		// The caller gave up (shutdown); the publish may have landed.
		return err
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, natsjs.ErrInvalidSubject), errors.Is(err, natsjs.ErrInvalidOption):
		return fmt.Errorf("%w: %w", ErrTaskRejected, err)
	default:
		// No answer from JetStream: timeout, no responders, connection
		// closed or reconnecting, a garbled ack.
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
}

// FinalDelivery reports whether msg is on its last delivery: if the worker
// fails it now, it must call GiveUp rather than Nak, or the task stays in
// the queue and its conversation stays busy for good.
func (s *Store) FinalDelivery(msg natsjs.Msg) bool {
	meta, err := msg.Metadata()
	if err != nil {
		return false
	}
	return meta.NumDelivered >= uint64(s.opts.TaskMaxDeliver)
}

// GiveUp ends a task for good and frees its conversation: it terminates
// msg with reason (no more deliveries; the server's "terminated" advisory
// carries reason) and deletes it from the task stream by its sequence, so
// that when GiveUp returns nil a new task for the conversation is accepted.
//
// Why both: a message whose deliveries reached TaskMaxDeliver stays in the
// work queue. The server removes it on a Term even then (nats-server
// 2.15), but Term is fire-and-forget, the removal happens later in the
// consumer, and nats.go refuses to send Term for a message it has already
// acked or nacked (ErrMsgAlreadyAckd) — the usual case for a worker that
// nacked its last delivery. The delete is confirmed by the server.
// Recording the reason in the task record is the caller's job.
func (s *Store) GiveUp(ctx context.Context, msg natsjs.Msg, reason string) error {
	meta, err := msg.Metadata()
	if err != nil {
		return fmt.Errorf("give up task: %w", err)
	}
	seq := meta.Sequence.Stream
	log := s.opts.Logger.With().Str("subject", msg.Subject()).Uint64("seq", seq).
		Uint64("deliveries", meta.NumDelivered).Str("reason", reason).Logger()
	if err := msg.TermWithReason(reason); err != nil && !errors.Is(err, natsjs.ErrMsgAlreadyAckd) {
		// Keep going: the delete below is what frees the conversation.
		log.Warn().Err(err).Msg("terminate task")
	}
	if err := s.deleteTask(ctx, seq); err != nil {
		return fmt.Errorf("give up task %s seq %d: %w", msg.Subject(), seq, err)
	}
	log.Info().Msg("gave up task")
	return nil
}

// Requeue puts msg's task back in its conversation's queue as a new
// message with all its deliveries ahead of it, for a delivery that was
// never run (its worker was stopping when it came): a Nak would spend the
// delivery, and on the last one the task would be given up unrun.
//
// The conversation holds one message at a time, so msg is deleted first,
// then the same subject, body and headers are published under the
// message id "<msgid>#requeued-<seq>" (a retried Requeue of one message
// is stored once). Between the two the conversation is free: a new task
// published there meanwhile wins, and the copy is refused with
// ErrConversationBusy. On any error the copy may not be queued; the task
// record still says where the task is, and the sweep ends it as it ends
// any task whose queue message is gone.
func (s *Store) Requeue(ctx context.Context, msg natsjs.Msg) (PublishResult, error) {
	meta, err := msg.Metadata()
	if err != nil {
		return PublishResult{}, fmt.Errorf("requeue task: %w", err)
	}
	return s.requeue(ctx, msg.Subject(), msg.Data(), msg.Headers(), meta.Sequence.Stream)
}

// RequeueStored is Requeue of the task message stored at msg's sequence,
// read from the stream (GetMsg): for a message no worker holds, such as
// one past its last delivery.
func (s *Store) RequeueStored(ctx context.Context, msg *natsjs.RawStreamMsg) (PublishResult, error) {
	return s.requeue(ctx, msg.Subject, msg.Data, msg.Header, msg.Sequence)
}

// RequeuesHdr counts the times a task message was requeued (Requeue,
// RequeueStored): each copy carries its original's count plus one.
const RequeuesHdr = "Botctl-Requeues"

// Requeues is how many times the task message with header h was requeued.
func Requeues(h nats.Header) int {
	n, _ := strconv.Atoi(h.Get(RequeuesHdr))
	return n
}

func (s *Store) requeue(ctx context.Context, subject string, data []byte, header nats.Header, seq uint64) (PublishResult, error) {
	if err := s.deleteTask(ctx, seq); err != nil {
		return PublishResult{}, fmt.Errorf("requeue task %s seq %d: delete: %w", subject, seq, err)
	}
	dup := nats.NewMsg(subject)
	dup.Data = data
	for k, v := range header {
		if k != nats.MsgIdHdr && k != RequeuesHdr {
			dup.Header[k] = v
		}
	}
	dup.Header.Set(RequeuesHdr, strconv.Itoa(Requeues(header)+1))
	ack, err := s.js.PublishMsg(ctx, dup,
		natsjs.WithMsgID(fmt.Sprintf("%s#requeued-%d", header.Get(nats.MsgIdHdr), seq)),
		natsjs.WithExpectStream(s.names.TaskStream))
	if err != nil {
		return PublishResult{}, fmt.Errorf("requeue task %s seq %d: publish: %w", subject, seq, classify(ctx, err))
	}
	return PublishResult{Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// deleteTask removes the task at seq; one already gone is not an error.
func (s *Store) deleteTask(ctx context.Context, seq uint64) error {
	err := s.stream.DeleteMsg(ctx, seq)
	if err == nil {
		return nil
	}
	// A failed delete says why only in text; ask whether it is gone.
	if _, gerr := s.stream.GetMsg(ctx, seq); errors.Is(gerr, natsjs.ErrMsgNotFound) {
		return nil
	}
	return err
}

// ReleaseConversation removes whatever task the conversation has in the
// queue, queued, running or stuck after its last delivery, and reports how
// many it removed (0 or 1). It is the operator's way out ("botctl tasks
// cancel") and the recovery path for a task whose last delivery died with
// its worker, which nobody holds any more to GiveUp.
//
// A worker still running the removed task finds out when its Ack fails or
// is ignored; it must not write a final state over the operator's.
func (s *Store) ReleaseConversation(ctx context.Context, bot, conversation, reason string) (uint64, error) {
	subj := s.names.TaskSubject(bot, conversation)
	msg, err := s.stream.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("release conversation %s of bot %s: %w", conversation, bot, err)
	}
	if err := s.deleteTask(ctx, msg.Sequence); err != nil {
		return 0, fmt.Errorf("release conversation %s of bot %s: seq %d: %w", conversation, bot, msg.Sequence, err)
	}
	s.opts.Logger.Info().Str("bot", bot).Str("conversation", conversation).Uint64("seq", msg.Sequence).
		Str("reason", reason).Msg("released conversation")
	return 1, nil
}

// ReleaseQueued removes conversation's message from the task queue of
// prefix ("" is DefaultPrefix) and returns it (nil: the conversation
// held none), with no Store: for an operator's tool when Declare cannot
// open the store (a bucket failing), since the queue alone holds the
// conversation. Whoever can should use task.Lifecycle's Release, which
// also ends the task's record.
func ReleaseQueued(ctx context.Context, js natsjs.JetStream, prefix, bot, conversation string) (*natsjs.RawStreamMsg, error) {
	n := NamesFor(prefix)
	st, err := js.Stream(ctx, n.TaskStream)
	if err != nil {
		return nil, fmt.Errorf("task stream %s: %w", n.TaskStream, err)
	}
	s := &Store{js: js, names: n, stream: st}
	msg, err := s.ConversationTask(ctx, bot, conversation)
	if err != nil || msg == nil {
		return nil, err
	}
	if err := s.RemoveTask(ctx, msg.Sequence); err != nil {
		return nil, err
	}
	return msg, nil
}

// RemoveTask deletes the task message at seq from the task stream, freeing
// its conversation; a message already gone is not an error. Whoever
// removes a task records why in its record (package task's Lifecycle).
func (s *Store) RemoveTask(ctx context.Context, seq uint64) error {
	if err := s.deleteTask(ctx, seq); err != nil {
		return fmt.Errorf("remove task seq %d: %w", seq, err)
	}
	return nil
}

// ConversationTask is the conversation's message in the task queue, if it
// has one: (nil, nil) when the conversation is free.
func (s *Store) ConversationTask(ctx context.Context, bot, conversation string) (*natsjs.RawStreamMsg, error) {
	msg, err := s.stream.GetLastMsgForSubject(ctx, s.names.TaskSubject(bot, conversation))
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("task queue of conversation %s of bot %s: %w", conversation, bot, err)
	}
	return msg, nil
}

// QueuedConversations lists the conversations of bot that have a message
// in the task queue (queued, running or stuck).
func (s *Store) QueuedConversations(ctx context.Context, bot string) ([]string, error) {
	q, err := s.ListQueue(ctx, bot)
	return q.Conversations, err
}

// QueueListing is what ListQueue found.
type QueueListing struct {
	// Conversations of the bot that have a message in the task queue.
	Conversations []string
	// ServerTime is the server's clock when it listed them (zero from a
	// server that does not say). A queue message's age is
	// ServerTime.Sub(msg.Time): both times are the server's, so the age
	// is right however far this node's clock is off.
	ServerTime time.Time
}

// ListQueue lists the conversations of bot that have a message in the
// task queue (queued, running or stuck), and the server's clock, for the
// lifecycle's sweep.
func (s *Store) ListQueue(ctx context.Context, bot string) (QueueListing, error) {
	filter := s.names.TaskSubjectPrefix + "." + EncodeToken(bot) + ".*"
	info, err := s.stream.Info(ctx, natsjs.WithSubjectFilter(filter))
	if err != nil {
		return QueueListing{}, fmt.Errorf("list queued conversations of bot %s: %w", bot, err)
	}
	q := QueueListing{ServerTime: info.TimeStamp}
	for subj := range info.State.Subjects {
		if _, conv, err := s.names.ParseTaskSubject(subj); err == nil {
			q.Conversations = append(q.Conversations, conv)
		}
	}
	return q, nil
}

// MaxDeliveriesSubject is where the server announces a task message that
// reached TaskMaxDeliver without being acked (the MAX_DELIVERIES advisory):
// it can never run again, and stays in the queue until removed.
func (s *Store) MaxDeliveriesSubject() string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + s.names.TaskStream + "." + s.names.Consumer
}

// LostCAS reports whether a compare-and-set write to a KV bucket (Create,
// Update with a revision) lost a race and should be retried after
// re-reading: somebody wrote first (ErrKeyExists, wrong last sequence
// 10071), or, on a clustered bucket, another write to the same key was
// still being applied (10164, "wrong last sequence" without a number: the
// revision may well be right: on R3 buckets a write can be refused so
// several times in a row). Pause with CASPause before the retry.
func LostCAS(err error) bool {
	var apiErr *natsjs.APIError
	return errors.Is(err, natsjs.ErrKeyExists) ||
		(errors.As(err, &apiErr) && (apiErr.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == errCodeWriteInFlight))
}

// errCodeWriteInFlight is nats-server's JSStreamWrongLastSequenceConstantErr.
const errCodeWriteInFlight natsjs.ErrorCode = 10164

// CASPause waits before retry n of a lost compare-and-set: not at all at
// first, then a little longer each time (up to 100 ms), so that a write
// the cluster is still applying has landed; it returns early when ctx ends.
func CASPause(ctx context.Context, n int) {
	if n == 0 {
		return
	}
	pause.For(ctx, time.Duration(min(n, 20))*5*time.Millisecond)
}
