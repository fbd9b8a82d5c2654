package task_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

func bucket(t *testing.T) natsjs.KeyValue {
	t.Helper()
	return testenv.StartJetStream(t, jetstream.Options{}).Store.Tasks()
}

func TestTransitions(t *testing.T) {
	now := time.Now()
	r := task.New("b", "m1", now)
	if r.ID != task.ID("b", "m1") || r.ID == task.ID("b", "m2") || r.ID == task.ID("c", "m1") {
		t.Fatal("ids must be deterministic per (bot, msgid)")
	}
	if err := r.SetExec(task.Succeeded, "", "", now); !errors.Is(err, task.ErrTransition) {
		t.Fatalf("queued → succeeded allowed: %v", err)
	}
	for _, step := range []task.Exec{task.Running, task.Running, task.Succeeded, task.Queued} {
		if err := r.SetExec(step, "why", "n1", now); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.SetDelivery(task.Streaming, "", "", now); err != nil {
		t.Fatal(err)
	}
	if err := r.SetDelivery(task.Streaming, "", "", now); !errors.Is(err, task.ErrTransition) {
		t.Fatalf("streaming → streaming allowed: %v", err)
	}
	if err := r.SetDelivery(task.Truncated, "window", "", now); err != nil {
		t.Fatal(err)
	}
	if err := r.SetDelivery(task.Delivered, "pushed", "", now); err != nil {
		t.Fatal(err)
	}
	if len(r.Transitions) != 7 || r.Transitions[6].Reason != "pushed" || r.Transitions[0].Node != "n1" {
		t.Fatalf("transitions = %+v", r.Transitions)
	}
	for range 2 * task.MaxTransitions {
		r.SetExec(task.Running, "", "", now)
	}
	if len(r.Transitions) != task.MaxTransitions {
		t.Fatalf("history not bounded: %d", len(r.Transitions))
	}
}

// Concurrent writers never lose each other's changes.
func TestUpdateIsCompareAndSet(t *testing.T) {
	kv := bucket(t)
	ctx := context.Background()
	r := task.New("b", "m1", time.Now())
	if _, err := task.Create(ctx, kv, r); err != nil {
		t.Fatal(err)
	}
	if _, err := task.Create(ctx, kv, r); !errors.Is(err, natsjs.ErrKeyExists) {
		t.Fatalf("second create: %v", err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5 {
				if _, err := task.Update(ctx, kv, r.ID, func(r *task.Record) error { r.Attempt++; return nil }); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	got, _, err := task.Get(ctx, kv, r.ID)
	if err != nil || got.Attempt != 40 {
		t.Fatalf("attempt = %d (%v), want 40", got.Attempt, err)
	}
	if _, err := task.Update(ctx, kv, r.ID, func(*task.Record) error { return task.ErrNoChange }); err != nil {
		t.Fatal(err)
	}
	if _, err := task.Update(ctx, kv, "t_missing", func(*task.Record) error { return nil }); !errors.Is(err, natsjs.ErrKeyNotFound) {
		t.Fatalf("missing: %v", err)
	}
}
