package worker

import (
	"context"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// The worker's hand-offs below its queue loop, each the few methods it
// asks of the task and data-plane packages: a task's attempt (execute.go)
// reads and writes its record through Lifecycle, and what lies beside
// the record (the conversation's context, the task's files, the bot's
// token counts) through Buckets. The queue loop itself (run.go) works on
// the JetStream work queue and keeps Config.Store.

// Lifecycle is what the worker asks of a task's record: the one writer
// of every record (*task.Lifecycle). Every write is fenced by attempt:
// an attempt that was taken over gets task.ErrSuperseded, and a task
// that ended meanwhile task.ErrFinished.
type Lifecycle interface {
	// Start makes the record say running under a new attempt (its number
	// returned, with the record), deliveries the queue's count (0: off
	// the queue).
	Start(ctx context.Context, m task.Message, tier string, deliveries int) (int, *task.Record, error)
	// Get reads the record (the cancel check: canceled, or taken over).
	Get(ctx context.Context, id string) (*task.Record, error)
	// OffQueue reads the record of a task run off the queue, and whether
	// that attempt is alive (run.go's hold).
	OffQueue(ctx context.Context, id string) (*task.Record, bool, error)
	// Output is the attempt's fenced writer of its text.
	Output(id, bot string, attempt int) *task.OutputWriter
	// AddUsage adds the tokens a backend reported to the record.
	AddUsage(ctx context.Context, id string, attempt int, u task.Usage) error
	// Finish records the attempt's answer, text, as the task's.
	Finish(ctx context.Context, id string, attempt int, text string, steps ...task.BackendStep) (*task.Record, error)
	// Fail records the attempt's failure: queued again for another
	// attempt (retry), or failed for good.
	Fail(ctx context.Context, id string, attempt int, reason string, retry bool, steps ...task.BackendStep) (*task.Record, error)
	// GiveUp fails the task for good, whatever its attempt (msg nil: the
	// caller ends the queue message itself).
	GiveUp(ctx context.Context, id, reason string, msg natsjs.Msg) (*task.Record, error)
	// FreeConversation frees the conversation of a task finished off the
	// queue (no queue ack will).
	FreeConversation(ctx context.Context, r *task.Record, reason string)
}

// Buckets is what a task's attempt reads and writes beside its record
// (*jetstream.Store).
type Buckets interface {
	// Context is the conversations' context bucket (task.LoadConversation,
	// task.AppendExchangeFrom).
	Context() natsjs.KeyValue
	// Media is the object store of the task's files and its reply's.
	Media() natsjs.ObjectStore
	// DeleteMedia deletes media objects, also from a full store (a
	// reply's objects an attempt stored but will not deliver).
	DeleteMedia(ctx context.Context, keys ...string) error
	// Limits is the bucket of the bots' and users' counts (limits.New).
	Limits() natsjs.KeyValue
	// Reconnected's channel closes when the store's connection comes
	// back (the cancel check re-reads the record then).
	Reconnected() <-chan struct{}
}

// What the node passes.
var (
	_ Lifecycle = (*task.Lifecycle)(nil)
	_ Buckets   = (*jetstream.Store)(nil)
)
