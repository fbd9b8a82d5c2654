package dispatch

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

// A spooled task that the queue refuses when it is forwarded (its
// conversation's earlier task still runs) is recorded failed as a busy
// refusal, so the user, who was told "received", gets the busy reply.
func TestSpoolRefusedIsRecorded(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	m := task.Message{TaskID: task.ID("b", "m1"), Bot: "b", MsgID: "m1", Chat: "alice", Question: "q", Received: time.Now()}
	raw, _ := json.Marshal(m)
	e := jetstream.SpoolEntry{Bot: "b", Conversation: "alice", MsgID: "m1", Payload: raw}
	NewSpoolOut(env.Store, task.NewLifecycle(env.Store, "n1", zerolog.Nop()), zerolog.Nop(), nil).refused(context.Background(), e, jetstream.ErrConversationBusy)
	r, _, err := task.Get(context.Background(), env.Store.Tasks(), m.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Exec != task.Failed || !r.Busy || !strings.Contains(r.Error, "earlier question") || r.Chat != "alice" {
		t.Fatalf("record = %+v", r)
	}
}
