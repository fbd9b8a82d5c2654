package worker_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/worker"
	dto "github.com/prometheus/client_model/go"
)

// refusals is how many task messages of version v this process refused.
func refusals(v int) float64 {
	var m dto.Metric
	schema.Newer.WithLabelValues(task.KindMessage, strconv.Itoa(v), strconv.Itoa(schema.Version)).Write(&m)
	return m.GetCounter().GetValue()
}

// A worker that fetches a task message written by a newer botctl hands it
// back untouched, again at each delivery: it runs nothing, writes no
// record, neither acks nor terminates the message, and counts each
// refusal with both versions. The message waits in the queue, as it was
// published, for a worker of that version.
func TestNewerTaskMessageIsLeftForANewerWorker(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{TaskMaxDeliver: 20})
	runWith(t, worker.Config{NodeID: "w1", Backend: demo(t, 10*time.Millisecond), Store: env.Store})
	r := task.New("b", "m1", time.Now())
	r.Chat, r.ChatType, r.User, r.Question = "alice", "single", "alice", "q"
	raw, _ := schema.Marshal(task.MessageOf(r))
	v := schema.Version + 1
	raw = append([]byte(`{"v":`+strconv.Itoa(v)), raw[len(`{"v":`+strconv.Itoa(schema.Version)):]...)
	before := refusals(v)
	if _, err := env.Store.PublishTask(context.Background(), "b", "alice", "m1", raw); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "the message refused three times, or taken", func() bool {
		msg, err := env.Store.ConversationTask(context.Background(), "b", "alice")
		return refusals(v)-before >= 3 || err == nil && msg == nil
	})
	msg, err := env.Store.ConversationTask(context.Background(), "b", "alice")
	if err != nil || msg == nil {
		t.Fatalf("the newer task's message left the queue: %v", err)
	}
	if string(msg.Data) != string(raw) {
		t.Fatalf("the queue message changed: %s", msg.Data)
	}
	if _, _, err := task.Get(context.Background(), env.Store.Tasks(), r.ID); err == nil {
		t.Fatal("the worker wrote a record for a task it does not understand")
	}
}
