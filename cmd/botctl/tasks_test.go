package main

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

// publishTask queues a task for chat of bot "b", and opens its record
// unless withoutRecord (the leader's write failed).
func publishTask(t *testing.T, st *jetstream.Store, msgid, chat string, withoutRecord bool) task.Message {
	t.Helper()
	ctx := context.Background()
	r := task.New("b", msgid, time.Now())
	r.Chat, r.ChatType, r.User, r.Question = chat, "single", chat, "q "+msgid
	m := task.MessageOf(r)
	raw, _ := json.Marshal(m)
	if _, err := st.PublishTask(ctx, "b", chat, msgid, raw); err != nil {
		t.Fatal(err)
	}
	if !withoutRecord {
		if _, err := task.NewLifecycle(st, "leader", zerolog.Nop()).Open(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func held(t *testing.T, st *jetstream.Store, chat string) bool {
	t.Helper()
	msg, err := st.ConversationTask(context.Background(), "b", chat)
	if err != nil {
		t.Fatal(err)
	}
	return msg != nil
}

// `botctl tasks release --bot B --chat C` frees a conversation whose task
// has no record (the task given up through a record made from its queue
// message, so its user is told), says so, and says when there is nothing
// to release.
func TestTasksReleaseWithoutARecord(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	url := env.Server.ClientURL()
	m := publishTask(t, env.Store, "m1", "alice", true)

	out, err := run(t, "tasks", "release", "--bot", "b", "--chat", "alice", "--nats", url, "--json")
	if err != nil {
		t.Fatalf("release: %v\n%s", err, out)
	}
	var rel task.Released
	if err := json.Unmarshal([]byte(out), &rel); err != nil {
		t.Fatalf("release --json: %v\n%s", err, out)
	}
	if !rel.Removed || rel.Task != m.TaskID || rel.Record != "opened and failed" || held(t, env.Store, "alice") {
		t.Fatalf("release: %+v, held %v", rel, held(t, env.Store, "alice"))
	}
	r, _, err := task.Get(context.Background(), env.Store.Tasks(), m.TaskID)
	if err != nil || r.Exec != task.Failed || !strings.Contains(r.Error, "operator") {
		t.Fatalf("record: %+v %v", r, err)
	}

	out, err = run(t, "tasks", "release", "--bot", "b", "--chat", "alice", "--nats", url)
	if err != nil || !strings.Contains(out, "holds no task") {
		t.Fatalf("second release: %v\n%s", err, out)
	}
	if out, err := run(t, "tasks", "release", "--bot", "b", "--nats", url); err == nil || !strings.Contains(err.Error(), "--chat") {
		t.Fatalf("release without --chat: %v\n%s", err, out)
	}
}

// While the tasks bucket fails, `botctl tasks release` still frees the
// conversation (the queue message alone holds it), and says that the
// record was not written.
func TestTasksReleaseWhileTheTasksBucketFails(t *testing.T) {
	fault := testenv.StartBucketFault(t)
	_, probe := fault.Store(t, fault.ProbeURL, jetstream.Options{})
	m := publishTask(t, probe, "m1", "bob", false)
	fault.Fail(t, probe.Names().TasksBucket)

	out, err := run(t, "tasks", "release", "--bot", "b", "--chat", "bob", "--nats", fault.URL, "--timeout", "3s")
	if err != nil {
		t.Fatalf("release: %v\n%s", err, out)
	}
	if !strings.Contains(out, "removed queue message") || !strings.Contains(out, m.TaskID) || !strings.Contains(out, "not written") || held(t, probe, "bob") {
		t.Fatalf("release while the tasks bucket fails: %q, held %v", out, held(t, probe, "bob"))
	}
}
