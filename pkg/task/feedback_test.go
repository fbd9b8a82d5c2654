package task_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// open opens a record of bot b for msgid, as the leader does.
func (f *fixture) open(msgid string) *task.Record {
	f.t.Helper()
	r := task.New("b", msgid, time.Now())
	r.Chat, r.ChatType, r.User, r.Question = "alice", "single", "alice", "q "+msgid
	if _, err := f.lc.Open(f.ctx, r); err != nil {
		f.t.Fatal(err)
	}
	return r
}

// overtakenKV is the task bucket with another writer of the record
// coming first once: the first Update writes the record (unchanged, a
// new revision) just before it goes, so its compare-and-set is refused
// by JetStream and the update is tried again, as when the pusher or a
// worker writes the record at the same moment.
type overtakenKV struct {
	natsjs.KeyValue
	overtaken atomic.Bool
	updates   atomic.Int32
}

func (kv *overtakenKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	kv.updates.Add(1)
	if kv.overtaken.CompareAndSwap(false, true) {
		if _, err := task.Update(ctx, kv.KeyValue, key, func(*task.Record) error { return nil }); err != nil {
			return 0, fmt.Errorf("the other writer: %w", err)
		}
	}
	return kv.KeyValue.Update(ctx, key, value, revision)
}

// A verdict whose write lost the compare-and-set to another writer of
// the record is counted once, not once per try: the retry counted on
// from the lost try's count, and one feedback_event was recorded with
// Count 2 (TestFeedbackRecordedWithItsTask, under CI's load).
func TestFeedbackCountedOnceWhenItsWriteIsOvertaken(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	r := f.open("m1")
	kv := &overtakenKV{KeyValue: f.env.Store.Tasks()}
	fb := task.Feedback{Kind: "inaccurate", Content: "too short", Reasons: []int{2, 3}, User: "alice", At: time.Now().UTC()}
	if _, err := task.RecordFeedback(f.ctx, kv, "b", r.ID, "ev1", fb); err != nil {
		t.Fatal(err)
	}
	if !kv.overtaken.Load() || kv.updates.Load() != 2 {
		t.Fatalf("the write was not retried after losing its compare-and-set: overtaken %v, %d updates", kv.overtaken.Load(), kv.updates.Load())
	}
	got := f.record(r.ID).Feedback
	if got == nil || got.Count != 1 || got.Kind != "inaccurate" || !slices.Equal(got.Reasons, []int{2, 3}) || !slices.Equal(got.MsgIDs, []string{"ev1"}) {
		t.Fatalf("recorded %+v, want one inaccurate verdict of event ev1", got)
	}
}

// A feedback_event delivered again (its msgid counted already) changes
// nothing and says so; the user's next verdict is counted, and a
// redelivery of the first one, after it, still is not.
func TestFeedbackEventCountedOnce(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	r := f.open("m1")
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	down := task.Feedback{Kind: "inaccurate", Content: "too short", User: "alice", At: at}
	if _, err := f.lc.Feedback(f.ctx, "b", r.ID, "ev1", down); err != nil {
		t.Fatal(err)
	}
	if _, err := f.lc.Feedback(f.ctx, "b", r.ID, "ev1", down); !errors.Is(err, task.ErrFeedbackCounted) {
		t.Fatalf("the same event again: %v, want ErrFeedbackCounted", err)
	}
	if got := f.record(r.ID).Feedback; got.Count != 1 {
		t.Fatalf("after a redelivery: %+v, want Count 1", got)
	}
	withdrawn := task.Feedback{Kind: "canceled", User: "alice", At: at.Add(time.Minute)}
	if _, err := f.lc.Feedback(f.ctx, "b", r.ID, "ev2", withdrawn); err != nil {
		t.Fatal(err)
	}
	if _, err := f.lc.Feedback(f.ctx, "b", r.ID, "ev1", down); !errors.Is(err, task.ErrFeedbackCounted) {
		t.Fatalf("the first event again, after the second: %v, want ErrFeedbackCounted", err)
	}
	got := f.record(r.ID).Feedback
	if got.Count != 2 || got.Kind != "canceled" || got.Content != "" || !got.At.Equal(at.Add(time.Minute)) || !slices.Equal(got.MsgIDs, []string{"ev1", "ev2"}) {
		t.Fatalf("recorded %+v, want the withdrawal, 2 verdicts", got)
	}
	if _, err := f.lc.Feedback(f.ctx, "c", r.ID, "ev3", down); err == nil || errors.Is(err, task.ErrFeedbackCounted) {
		t.Fatalf("feedback of another bot's task: %v, want an error naming it", err)
	}
}

// The record keeps the msgids of the last FeedbackMsgIDsKept verdicts;
// an event without a msgid cannot be told from its redelivery and is
// counted each time.
func TestFeedbackMsgIDsBounded(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	r := f.open("m1")
	fb := task.Feedback{Kind: "accurate", User: "alice", At: time.Now().UTC()}
	n := task.FeedbackMsgIDsKept + 3
	for i := range n {
		if _, err := f.lc.Feedback(f.ctx, "b", r.ID, fmt.Sprintf("ev%d", i), fb); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := f.lc.Feedback(f.ctx, "b", r.ID, "", fb); err != nil {
			t.Fatal(err)
		}
	}
	got := f.record(r.ID).Feedback
	if got.Count != n+2 || len(got.MsgIDs) != task.FeedbackMsgIDsKept ||
		got.MsgIDs[0] != fmt.Sprintf("ev%d", n-task.FeedbackMsgIDsKept) || got.MsgIDs[len(got.MsgIDs)-1] != fmt.Sprintf("ev%d", n-1) {
		t.Fatalf("after %d events and 2 without a msgid: count %d, msgids %v", n, got.Count, got.MsgIDs)
	}
	if _, err := f.lc.Feedback(f.ctx, "b", r.ID, fmt.Sprintf("ev%d", n-1), fb); !errors.Is(err, task.ErrFeedbackCounted) {
		t.Fatalf("the latest event again: %v, want ErrFeedbackCounted", err)
	}
}

// A record written before the msgids were kept reads as before, and its
// next verdict is counted on from its count; a verdict's JSON without
// msgids has no "msgids" key (the shape older readers know).
func TestFeedbackOnARecordWithoutMsgIDs(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	r := task.New("b", "m1", time.Now())
	r.Chat, r.ChatType, r.User, r.Question = "alice", "single", "alice", "q"
	r.Feedback = &task.Feedback{Kind: "accurate", User: "alice", At: time.Now().UTC(), Count: 3}
	raw, err := json.Marshal(r.Feedback)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "msgids") {
		t.Fatalf("a verdict without msgids marshals as %s", raw)
	}
	if _, err := task.Create(f.ctx, f.env.Store.Tasks(), r); err != nil {
		t.Fatal(err)
	}
	if _, err := f.lc.Feedback(f.ctx, "b", r.ID, "ev1", task.Feedback{Kind: "inaccurate", User: "alice", At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if got := f.record(r.ID).Feedback; got.Count != 4 || got.Kind != "inaccurate" || !slices.Equal(got.MsgIDs, []string{"ev1"}) {
		t.Fatalf("recorded %+v, want the 4th verdict", got)
	}
}
