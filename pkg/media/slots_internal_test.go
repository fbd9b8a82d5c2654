package media

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// The slots' rules, one step at a time: a conversation holds at most its
// share; a freed slot goes to the first waiter whose conversation is
// under its share; a waiter whose context ends holds nothing.
func TestSlotsShareAndOrder(t *testing.T) {
	s := newSlots(3, 2)
	ctx := context.Background()
	for range 2 {
		if err := s.acquire(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	// a is at its share: its third waits although a slot is free.
	aWaits := make(chan error, 1)
	go func() { aWaits <- s.acquire(ctx, "a") }()
	waitFor(t, s, 1)
	if err := s.acquire(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if s.free != 0 || s.held["a"] != 2 || s.held["b"] != 1 {
		t.Fatalf("free %d, held %v: want a 2, b 1", s.free, s.held)
	}
	// c waits behind a's waiter; b's slot freed goes to c (a is at its
	// share), a's freed slot to a's waiter.
	cWaits := make(chan error, 1)
	go func() { cWaits <- s.acquire(ctx, "c") }()
	waitFor(t, s, 2)
	s.release("b")
	if err := granted(t, cWaits, "c, under its share, after b's slot freed"); err != nil {
		t.Fatal(err)
	}
	s.release("a")
	if err := granted(t, aWaits, "a's waiter, after a's slot freed"); err != nil {
		t.Fatal(err)
	}
	if s.free != 0 || s.held["a"] != 2 || s.held["c"] != 1 || len(s.waiting) != 0 {
		t.Fatalf("free %d, held %v, %d waiting", s.free, s.held, len(s.waiting))
	}
	// A waiter whose context ends leaves the queue holding nothing.
	cause := errors.New("message deadline")
	dctx, cancel := context.WithCancelCause(ctx)
	dWaits := make(chan error, 1)
	go func() { dWaits <- s.acquire(dctx, "d") }()
	waitFor(t, s, 1)
	cancel(cause)
	if err := <-dWaits; !errors.Is(err, cause) {
		t.Fatalf("canceled waiter: %v, want its context's cause", err)
	}
	if len(s.waiting) != 0 || s.held["d"] != 0 {
		t.Fatalf("a canceled waiter left %d waiting, d holds %d", len(s.waiting), s.held["d"])
	}
	s.release("a")
	s.release("a")
	s.release("c")
	if s.free != 3 || len(s.held) != 0 {
		t.Fatalf("all released: free %d, held %v", s.free, s.held)
	}
}

// granted is what an acquire returned, within generous time.
func granted(t *testing.T, ch <-chan error, who string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no slot granted", who)
	}
	return nil
}

// waitFor waits until n acquires are queued.
func waitFor(t *testing.T, s *slots, n int) {
	t.Helper()
	for {
		s.mu.Lock()
		k := len(s.waiting)
		s.mu.Unlock()
		if k == n {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatal("waiters never queued")
		default:
			runtime.Gosched()
		}
	}
}
