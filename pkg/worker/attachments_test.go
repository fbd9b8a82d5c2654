package worker_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/worker"
)

func publishMessage(t *testing.T, store *jetstream.Store, m task.Message) {
	t.Helper()
	raw, _ := json.Marshal(m)
	if _, err := store.PublishTask(context.Background(), m.Bot, m.Chat, m.MsgID, raw); err != nil {
		t.Fatal(err)
	}
}

// A task's files are copied from the media store for the run (the exec
// backend reads them at the paths its json input names) and removed
// after it.
func TestAttachmentsReachTheBackendAndLeaveWithTheRun(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	if _, err := env.Store.Media().PutBytes(context.Background(), task.ID("b", "m1")+"/0", []byte("the file's bytes")); err != nil {
		t.Fatal(err)
	}
	b, err := ai.New(ai.Config{Kind: ai.KindExec, Exec: ai.ExecConfig{Input: "json",
		Command: []string{"sh", "-c", `grep -o '"path":"[^"]*"' | cut -d'"' -f4 | xargs cat`}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	runWith(t, worker.Config{NodeID: "w1", Backend: b, Store: env.Store, MediaDir: dir})
	m := task.Message{TaskID: task.ID("b", "m1"), Bot: "b", MsgID: "m1", Chat: "alice", Received: time.Now(),
		Attachments: []task.Attachment{{Kind: "file", Name: "../../etc/notes.txt", MIME: "text/plain", Size: 16, Key: task.ID("b", "m1") + "/0"}}}
	publishMessage(t, env.Store, m)
	testwait.Eventually(t, waitLong, "succeeded", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
	if o := answer(env.Store, m.TaskID); o.Text != "the file's bytes" {
		t.Fatalf("the backend read %q", o.Text)
	}
	// Removed after the run: the record says succeeded a moment before
	// the run's cleanup (seen in CI), so wait for it, not for the record.
	testwait.Eventually(t, waitLong, "the media dir emptied", func() bool {
		entries, _ := os.ReadDir(dir)
		return len(entries) == 0
	})
	conv, _, _ := task.LoadConversation(context.Background(), env.Store.Context(), jetstream.ConversationKey("b", "alice"))
	if conv == nil || len(conv.Turns) != 2 || conv.Turns[0].Content != "[sent: file ../../etc/notes.txt]" {
		t.Fatalf("context %+v", conv)
	}
}

// Files no longer in the store (past media.ttl) fail the task at once,
// saying so; no retry brings them back.
func TestAttachmentsGoneFailTheTaskWithoutRetry(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{TaskMaxDeliver: 5})
	run(t, env.Store, "w1", demo(t, 10*time.Millisecond))
	m := task.Message{TaskID: task.ID("b", "m1"), Bot: "b", MsgID: "m1", Chat: "alice", Question: "what is in it?", Received: time.Now(),
		Attachments: []task.Attachment{{Kind: "image", Name: "a.png", Key: task.ID("b", "m1") + "/0"}}}
	publishMessage(t, env.Store, m)
	testwait.Eventually(t, waitLong, "failed", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Failed })
	r := record(t, env.Store, m.TaskID)
	if r.Attempt != 1 || !strings.Contains(r.Error, "could not be read") || !strings.Contains(r.Error, "no longer stored") {
		t.Fatalf("record attempt %d error %q", r.Attempt, r.Error)
	}
}
