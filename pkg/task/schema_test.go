package task_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/botctl/botctl/pkg/task"
)

// newer is raw, a record this build stamped, as a newer botctl would have
// written it.
func newer(t *testing.T, raw []byte) []byte {
	t.Helper()
	own := []byte(`{"v":` + strconv.Itoa(schema.Version) + `,`)
	if !bytes.HasPrefix(raw, own) {
		t.Fatalf("record not stamped with this build's version: %.40s", raw)
	}
	return append([]byte(`{"v":`+strconv.Itoa(schema.Version+1)+`,`), raw[len(own):]...)
}

// A node meets a task record and a queue message written by a newer
// botctl: it starts neither, the sweep past the deadline ends neither,
// and both stay exactly as written, for a node of that version. Records
// and messages of the previous release (no version) are still swept.
func TestNewerRecordsAreLeftAsWritten(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	clock := time.Now()
	lc := f.lc.WithClock(func() time.Time { return clock })

	// alice: the record is a newer node's.
	m := f.queue("m1", "alice")
	e, err := f.env.Store.Tasks().Get(f.ctx, m.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := f.env.Store.Tasks().Put(f.ctx, m.TaskID, newer(t, e.Value()))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := lc.Start(f.ctx, m, "queue", 1); !errors.Is(err, schema.ErrNewer) {
		t.Fatalf("Start of a newer record: %v, want schema.ErrNewer", err)
	}
	if _, err := lc.Get(f.ctx, m.TaskID); !errors.Is(err, schema.ErrNewer) || task.StoreFailed(err) {
		t.Fatalf("Get of a newer record: %v (store failed %v), want schema.ErrNewer, not a store failure", err, task.StoreFailed(err))
	}

	// bob: the queue message is a newer node's (its record not yet written).
	r := task.New("b", "m2", clock)
	r.Chat, r.ChatType, r.User, r.Question = "bob", "single", "bob", "q"
	raw, _ := schema.Marshal(task.MessageOf(r))
	if _, err := f.env.Store.PublishTask(f.ctx, "b", "bob", "m2", newer(t, raw)); err != nil {
		t.Fatal(err)
	}

	clock = clock.Add(2 * time.Hour)
	f.olderThan("bob", 0)
	res, err := lc.Sweep(f.ctx, "b", time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Newer != 2 || res.Deadline != 0 || res.Abandoned != 0 {
		t.Fatalf("sweep: %+v, want both left as newer", res)
	}
	if !f.locked("alice") || !f.locked("bob") {
		t.Fatalf("a newer task's queue message removed: alice %v, bob %v", f.locked("alice"), f.locked("bob"))
	}
	if e, err := f.env.Store.Tasks().Get(f.ctx, m.TaskID); err != nil || e.Revision() != rev {
		t.Fatalf("the newer record was written over: %v, revision %d want %d", err, e.Revision(), rev)
	}
}

// A conversation's context a newer botctl wrote is not used and not
// written over: the exchange is not appended (the error names both
// versions) and the value stays as it was.
func TestNewerConversationIsNotWrittenOver(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	kv := f.env.Store.Context()
	key := jetstream.ConversationKey("b", "alice")
	mem := task.Memory{Turns: 10}
	if err := task.AppendExchange(f.ctx, kv, key, "q1", "a1", mem, time.Now()); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(f.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(f.ctx, key, newer(t, e.Value()))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := task.LoadConversation(f.ctx, kv, key); !errors.Is(err, schema.ErrNewer) {
		t.Fatalf("LoadConversation: %v, want schema.ErrNewer", err)
	}
	if err := task.AppendExchange(f.ctx, kv, key, "q2", "a2", mem, time.Now()); !errors.Is(err, schema.ErrNewer) {
		t.Fatalf("AppendExchange: %v, want schema.ErrNewer", err)
	}
	if e, err := kv.Get(f.ctx, key); err != nil || e.Revision() != rev {
		t.Fatalf("the newer context was written over: %v", err)
	}
}

// A notice whose record a newer botctl wrote carries no record to use:
// the pusher reads the bucket, where Get refuses it. Output likewise.
func TestNewerNoticeAndOutputAreNotRead(t *testing.T) {
	r := task.New("b", "m1", time.Now())
	msg := task.NoticeMsg(jetstream.Names{}, r, 7)
	if _, rec, _ := task.NoticeOf(msg); rec == nil {
		t.Fatal("this version's notice record not read")
	}
	raw, _ := schema.Marshal(r)
	msg.Header.Set("Botctl-Record", base64.StdEncoding.EncodeToString(newer(t, raw)))
	if id, rec, rev := task.NoticeOf(msg); id != r.ID || rec != nil || rev != 0 {
		t.Fatalf("a newer notice record read: %v %d", rec, rev)
	}
	out, _ := schema.Marshal(task.Output{TaskID: r.ID, Text: "x"})
	if _, err := task.DecodeOutput(out); err != nil {
		t.Fatal(err)
	}
	if _, err := task.DecodeOutput(newer(t, out)); !errors.Is(err, schema.ErrNewer) {
		t.Fatalf("DecodeOutput of a newer output: %v", err)
	}
}
