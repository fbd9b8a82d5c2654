package access

import (
	"context"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/dispatch"
	"github.com/botctl/botctl/pkg/media"
	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// The inbound path's hand-offs, each named for what access asks of it.
// A message's way: the connection hands a callback to Access
// (HandleMessage), which screens it, receipts it and hands its task to
// the Dispatcher; the Outbound learns of it (the bot's pusher streams the
// answer), the Watermark of its end.

// Dispatcher hands a task to compute: the JetStream work queue (whose
// publish is the conversation's mutex), a fixed worker or this node
// (*dispatch.Dispatcher); before JetStream answers, the node's spool.
type Dispatcher interface {
	// DispatchUnless dispatches m. dup reports whether the message is a
	// duplicate (it waits for the dedupe read running beside the
	// dispatch; nil: known not to be); a dispatch asks it before any tier
	// but the queue.
	DispatchUnless(ctx context.Context, m task.Message, dup func() bool) (dispatch.Outcome, error)
}

// Outbound is the sending side of the bots this node leads: each bot's
// send budget, shared with its pusher, and its pusher while this node
// leads it. Its methods answer from memory and must not block.
type Outbound interface {
	// Budget is bot's per-conversation send budget: every reply sent here
	// is counted in it, so the pusher paces around them.
	Budget(bot string) *pace.Budget
	// Dispatched tells bot's pusher of each task handed to compute, and
	// of each busy refusal recorded for later, with its conversation (the
	// pusher's fast path; its resync finds them within a minute
	// otherwise).
	Dispatched(bot, taskID, chat string)
	// Idle predicts from memory that conversation chat has no task (the
	// bot's pusher: (*pusher.Pusher).Idle); false when it cannot tell.
	// For a fresh message (created after the connection that delivered
	// it was subscribed, so no other connection can have had it, and not
	// in the dedupe memory, so it is new) in a conversation predicted
	// idle, with no other message of it in hand, the receipt goes out
	// before the queue publish instead of after it (where the callback is
	// taken, in callback order; see the package doc), and the task
	// bucket's dedupe read is skipped: the receipt waits for no JetStream
	// round trip. The publish is still the mutex; when it finds the
	// conversation busy after all, the receipted stream is finished with
	// the busy reply.
	Idle(bot, chat string) bool
}

// Watermark learns of each message handled to the end (its task
// recorded in JetStream, or answered without one), with its create time:
// the inbound watermark (*backfill.Tracker). Must not block.
type Watermark interface {
	Handled(bot string, created time.Time)
}

// Marks are the conversations' "may be incomplete" marks (*health.Health).
type Marks interface {
	// Marked says from memory whether there may be a mark to take: a
	// message is known not to be a duplicate before a mark is taken for
	// it, and without Marks every message would wait for that first.
	Marked(bot, chat string) bool
	// TakeIncomplete takes the conversation's mark: the new task's
	// answer tells the user why it may be incomplete.
	TakeIncomplete(ctx context.Context, bot, chat string) (why string, ok bool)
}

// Metrics learns how long the receipt's path took; its methods must not
// block.
type Metrics interface {
	// Receipted: from the callback read off the connection to WeCom's
	// ack of the receipt frame.
	Receipted(bot string, d time.Duration)
	// Stage: each step on the receipt's path: "slot" (the callback read
	// → its handling begins: the wait for one of Parallel), "dedupe" (the
	// task bucket's read, beside the dispatch), "dispatch" (the
	// dispatch's answer: the queue publish, the conversation's mutex),
	// "media" (a message's download), "in_order" (the wait for the
	// conversation's messages with files read before it: order.go) and
	// "receipt_frame" (the receipt's send to WeCom's ack; an early
	// receipt's is the write to the ack read, measured by the
	// connection).
	Stage(bot, stage string, d time.Duration)
	// Feedback counts a user's verdict on an answer (a feedback_event),
	// by kind: accurate, inaccurate, canceled or unknown.
	Feedback(bot, kind string)
	// LimitRefused counts a message refused over one of its bot's limits,
	// by the limit's name (limits.UserMessagesPerMinute, …).
	LimitRefused(bot, limit string)
}

// Media takes a message's files from WeCom into the media bucket
// (*media.Fetcher): downloaded, decrypted, bounded, stored as
// <task id>/<n>, within the message's deadline (from its arrival) and
// its conversation's share of the node's downloads. A failure is a
// *media.Error saying why, for the user, or ctx's cause.
type Media interface {
	Fetch(ctx context.Context, obs natsjs.ObjectStore, b media.Batch) ([]task.Attachment, error)
	// MessageTimeout is the deadline Fetch holds a message's files to,
	// from its arrival.
	MessageTimeout() time.Duration
}

// Bots gives each bot's inbound Rules (its allowlists and texts), which
// change at run time: pkg/serve's per-bot settings. Asked once per
// message; it must answer from memory and not block. A nil Rules means
// Config's.
type Bots interface {
	Rules(bot string) *Rules
}

// Records is what access asks of tasks' records (*task.Lifecycle): every
// write goes through it, fenced as the task package says.
type Records interface {
	// Get reads a task's record (a card click's task).
	Get(ctx context.Context, id string) (*task.Record, error)
	// Open records a task handed to the queue or run here as queued.
	Open(ctx context.Context, r *task.Record) (*task.Record, error)
	// Receive records a task whose files are still being received, not
	// dispatched before until; Unreceived removes it once they are.
	Receive(ctx context.Context, r *task.Record, until time.Time) (*task.Record, error)
	Unreceived(ctx context.Context, id string) (removed bool, err error)
	// Refused records a message refused (busy: its conversation had a
	// task), answered by push.
	Refused(ctx context.Context, m task.Message, reason string, busy bool) (*task.Record, error)
	// RefusedSaying records a message refused whose words (text) the
	// user is owed, answered by push.
	RefusedSaying(ctx context.Context, m task.Message, text string) (*task.Record, error)
	// Stop ends the conversation's task (/stop).
	Stop(ctx context.Context, bot, chat, reason string) (task.Released, error)
	// Feedback records a user's verdict on a task's answer.
	Feedback(ctx context.Context, bot, id, msgid string, fb task.Feedback) (*task.Record, error)
}

// Buckets is what access reads and writes in JetStream beside the
// records (*jetstream.Store).
type Buckets interface {
	// Tasks is the task records' bucket (dedupe, /status).
	Tasks() natsjs.KeyValue
	// Progress and Output are a task's output (a card click's answer).
	Progress() natsjs.KeyValue
	Output() natsjs.KeyValue
	// Context is the conversations' context bucket (/new).
	Context() natsjs.KeyValue
	// Limits is the bucket of the bots' and users' counts (limits.New).
	Limits() natsjs.KeyValue
	// Media is the object store of the tasks' files; DeleteMedia removes
	// a refused message's, also from a full store.
	Media() natsjs.ObjectStore
	DeleteMedia(ctx context.Context, keys ...string) error
	// MarkSeen and Seen are the marks of messages answered without a
	// task (dedupe).
	MarkSeen(ctx context.Context, bot, msgid string) error
	Seen(ctx context.Context, bot, msgid string) (bool, error)
	// TaskStream and TaskSubject find a conversation's task in the queue
	// (/status).
	TaskStream() natsjs.Stream
	TaskSubject(bot, conversation string) string
	// UndeliveredTasks lists bot's tasks whose delivery has not ended.
	UndeliveredTasks(ctx context.Context, bot string) ([]string, error)
}

// What the node passes.
var (
	_ Records = (*task.Lifecycle)(nil)
	_ Buckets = (*jetstream.Store)(nil)
)
