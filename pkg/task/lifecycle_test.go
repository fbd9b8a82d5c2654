package task_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/botctl/botctl/dataplane"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

type fixture struct {
	t   *testing.T
	env *testenv.JetStream
	lc  *task.Lifecycle
	ctx context.Context
}

func newFixture(t *testing.T, opts dataplane.Options) *fixture {
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
