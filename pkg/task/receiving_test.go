package task_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// A message recorded before its files were taken (Receive) and never
// dispatched, its leader gone, is given up by the sweep once past its
// ReceivingUntil and the grace, long before the execution deadline: the
// user is told. One whose user was told at receipt (Unreceived) is
// removed, and not given up again; one dispatched is left to its run.
func TestSweepGivesUpAMessageWhoseFilesWereNeverReceived(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	clock := time.Now()
	lc := f.lc.WithClock(func() time.Time { return clock })

	lost := task.New("b", "m1", clock)
	lost.Chat = "alice"
	if _, err := lc.Receive(f.ctx, lost, clock.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	told := task.New("b", "m2", clock)
	told.Chat = "bob"
	lc.Receive(f.ctx, told, clock.Add(2*time.Minute))
	if removed, err := lc.Unreceived(f.ctx, told.ID); err != nil || !removed {
		t.Fatalf("unreceived: %v %v", removed, err)
	}
	if _, err := lc.Get(f.ctx, told.ID); !errors.Is(err, natsjs.ErrKeyNotFound) {
		t.Fatalf("the record of a message told at receipt stayed: %v", err)
	}
	dispatched := task.New("b", "m3", clock)
	dispatched.Chat = "carol"
	lc.Receive(f.ctx, dispatched, clock.Add(2*time.Minute))
	lc.Open(f.ctx, &task.Record{ID: dispatched.ID, Bot: "b", MsgID: "m3", Chat: "carol", Tier: "fixed"})
	if removed, err := lc.Unreceived(f.ctx, dispatched.ID); err != nil || removed {
		t.Fatalf("unreceived of a dispatched task: %v %v, want it left", removed, err)
	}

	if res, err := lc.Sweep(f.ctx, "b", time.Hour, time.Minute); err != nil || res.Unreceived != 0 {
		t.Fatalf("sweep within the receiving time: %+v %v", res, err)
	}
	clock = clock.Add(2*time.Minute + task.ReceivingGrace + time.Second)
	res, err := lc.Sweep(f.ctx, "b", time.Hour, time.Minute)
	if err != nil || res.Unreceived != 1 || res.Deadline != 0 {
		t.Fatalf("sweep past the receiving time: %+v %v, want one unreceived", res, err)
	}
	if r := f.record(lost.ID); r.Exec != task.Failed || r.Delivery != task.Pending || r.Error == "" {
		t.Fatalf("the lost message's record %s/%s %q: want failed, its delivery owed", r.Exec, r.Delivery, r.Error)
	}
	if r := f.record(dispatched.ID); r.Exec != task.Queued {
		t.Fatalf("the dispatched task was given up: %s", r.Exec)
	}
	ids, err := f.env.Store.UndeliveredTasks(f.ctx, "b")
	if err != nil || slices.Contains(ids, told.ID) || !slices.Contains(ids, lost.ID) {
		t.Fatalf("undelivered %v %v: want the lost one owed and not the one told", ids, err)
	}
}
