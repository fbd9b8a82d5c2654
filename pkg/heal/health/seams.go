package health

import (
	"context"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// What Health asks of JetStream once bound (Bind), each the few methods
// it uses: the records of tasks owed an answer through Records, the
// buckets it keeps its state in and reads beside them through Buckets.

// Records reads tasks' records (*task.Lifecycle): the outbound replay's
// look at each task owed an answer.
type Records interface {
	Get(ctx context.Context, id string) (*task.Record, error)
}

// Buckets is what Health reads and writes in JetStream
// (*jetstream.Store).
type Buckets interface {
	// Health is the bucket of the bots' health records and the
	// conversations' "may be incomplete" marks.
	Health() natsjs.KeyValue
	// Incidents is the incidents' bucket (incident.NewStore).
	Incidents() natsjs.KeyValue
	// Tasks is the task records' bucket (its name, for a corrupt
	// record's incident).
	Tasks() natsjs.KeyValue
	// Context is the conversations' context bucket (the conversations
	// active around a gap).
	Context() natsjs.KeyValue
	// UndeliveredTasks lists bot's tasks whose delivery has not ended.
	UndeliveredTasks(ctx context.Context, bot string) ([]string, error)
}

// What the node passes.
var (
	_ Records = (*task.Lifecycle)(nil)
	_ Buckets = (*jetstream.Store)(nil)
)
