package task_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

type fixture struct {
	t   *testing.T
	env *testenv.JetStream
	lc  *task.Lifecycle
	ctx context.Context
}

func newFixture(t *testing.T, opts jetstream.Options) *fixture {
	env := testenv.StartJetStream(t, opts)
	return &fixture{t: t, env: env, lc: task.NewLifecycle(env.Store, "n1", zerolog.Nop()), ctx: context.Background()}
}

// queue publishes a task for chat and opens its record, as the leader does.
func (f *fixture) queue(msgid, chat string) task.Message {
	f.t.Helper()
	r := task.New("b", msgid, time.Now())
	r.Chat, r.ChatType, r.User, r.Question = chat, "single", chat, "q "+msgid
	m := task.MessageOf(r)
	raw, _ := json.Marshal(m)
	if _, err := f.env.Store.PublishTask(f.ctx, "b", chat, msgid, raw); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.lc.Open(f.ctx, r); err != nil {
		f.t.Fatal(err)
	}
	return m
}

func (f *fixture) record(id string) *task.Record {
	f.t.Helper()
	r, err := f.lc.Get(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// locked reports whether chat's conversation has a message in the queue.
func (f *fixture) locked(chat string) bool {
	f.t.Helper()
	msg, err := f.env.Store.ConversationTask(f.ctx, "b", chat)
	if err != nil {
		f.t.Fatal(err)
	}
	return msg != nil
}

// A record written while the undelivered index fails says so, and the
// task's next start writes the index entry (issue 25 item 10: before, the
// task stayed out of the index for good, and a new leader's pusher never
// found it after a failover).
func TestStartRepairsAFailedIndexMark(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	pending := f.env.Store.Names().PendingBucket
	if err := f.env.JS.DeleteKeyValue(f.ctx, pending); err != nil {
		t.Fatal(err)
	}
	r := task.New("b", "m1", time.Now())
	r.Chat, r.ChatType, r.User, r.Question = "alice", "single", "alice", "q"
	if _, err := f.lc.Open(f.ctx, r); err == nil {
		t.Fatal("Open with the index bucket gone: no error")
	}
	if got := f.record(r.ID); !got.NotIndexed {
		t.Fatalf("record after a failed index mark: not_indexed %v, want true", got.NotIndexed)
	}
	// The bucket is back (its stream recreated, as after a stream-level fault).
	if _, err := jetstream.Declare(f.ctx, f.env.JS, jetstream.Options{}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := f.env.Store.UndeliveredTasks(f.ctx, "b"); len(ids) != 0 {
		t.Fatalf("index before the start: %v", ids)
	}
	if _, _, err := f.lc.Start(f.ctx, task.MessageOf(r), "queue", 1); err != nil {
		t.Fatal(err)
	}
	ids, err := f.env.Store.UndeliveredTasks(f.ctx, "b")
	if err != nil || len(ids) != 1 || ids[0] != r.ID {
		t.Fatalf("index after the start: %v %v, want [%s]", ids, err, r.ID)
	}
	if f.record(r.ID).NotIndexed {
		t.Fatal("record still says not_indexed after the repair")
	}
}
