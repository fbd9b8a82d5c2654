package pusher

import (
	"context"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// The pusher's hand-offs to the task and data-plane packages, each the
// few methods it asks of them: a task's delivery steps are written to its
// record through Deliveries (only by the ledger, ledger.go), and what
// lies beside the record (the output, the undelivered index, the
// watermark, the reply's files, the node's subjects) is read through
// Buckets.

// Deliveries is what the pusher asks of tasks' records
// (*task.Lifecycle): the delivery states of a task, each write fenced by
// the record's revision or its delivery state as the task package says.
type Deliveries interface {
	// ShownFrom records progress frames shown, from the record r read at
	// rev; WithShown is the record as it would be after them (in memory).
	ShownFrom(ctx context.Context, r *task.Record, rev uint64, frames ...task.Frame) (*task.Record, uint64, error)
	WithShown(r *task.Record, frames ...task.Frame) *task.Record
	// FinalIntentFrom records that the final frame is about to be sent.
	FinalIntentFrom(ctx context.Context, r *task.Record, rev uint64) (*task.Record, uint64, error)
	// Delivered and DeliveredFrom record the answer delivered (text, in
	// parts; why: how, when not in full).
	Delivered(ctx context.Context, from *task.Record, text, why string, parts int) (*task.Record, error)
	DeliveredFrom(ctx context.Context, r *task.Record, rev uint64, text, why string, parts int) (*task.Record, error)
	// Truncate records the answer cut short, why.
	Truncate(ctx context.Context, id, why string) (*task.Record, error)
	// PartPushed records part n of a split answer pushed.
	PartPushed(ctx context.Context, from *task.Record, n int) (*task.Record, error)
	// SendFailed records a failed push, failed for good after maxAttempts.
	SendFailed(ctx context.Context, id string, sendErr error, maxAttempts int) (*task.Record, error)
	// Expired records an answer owed too long to deliver.
	Expired(ctx context.Context, id string, owedFor time.Duration) (*task.Record, error)
	// Forget drops a task from bot's undelivered index.
	Forget(ctx context.Context, bot, id string) error
	// Corrupt reports a record that does not decode, where it was read.
	Corrupt(bot, id, where string, err error)
}

// Buckets is what the pusher reads and writes in JetStream beside the
// records (*jetstream.Store).
type Buckets interface {
	// Tasks is the task records' bucket.
	Tasks() natsjs.KeyValue
	// Progress and Output are the tasks' output: the text in progress
	// (watched) and each attempt's last write.
	Progress() natsjs.KeyValue
	Output() natsjs.KeyValue
	// Watermarks keeps the output watch's watermark.
	Watermarks() natsjs.KeyValue
	// Media is the object store of the replies' files; DeleteMedia
	// removes a reply's once delivered.
	Media() natsjs.ObjectStore
	DeleteMedia(ctx context.Context, keys ...string) error
	// UndeliveredTasks lists bot's tasks whose delivery has not ended.
	UndeliveredTasks(ctx context.Context, bot string) ([]string, error)
	// Reconnected's channel closes when the connection comes back.
	Reconnected() <-chan struct{}
	// JetStream's connection and Names carry the notices (subscribed)
	// and the flush requests (published).
	JetStream() natsjs.JetStream
	Names() jetstream.Names
}

// What the node passes.
var (
	_ Deliveries = (*task.Lifecycle)(nil)
	_ Buckets    = (*jetstream.Store)(nil)
)
