package media

import (
	"context"
	"sync"
)

// slots are a node's downloads at once (Config.Parallel), shared fairly
// between conversations: one conversation holds at most perConv of them,
// so a conversation whose downloads stall (or that sends many files)
// leaves the rest to the others. Waiters are served in arrival order,
// skipping those whose conversation holds its share.
//
// What it guarantees: at most size slots held; at most perConv held by
// one conversation; a waiter whose context ends holds none when acquire
// returns. What it does not: that a slot ever frees (a download's own
// deadline bounds that).
type slots struct {
	mu      sync.Mutex
	free    int
	perConv int
	held    map[string]int
	waiting []*slotWaiter
}

type slotWaiter struct {
	conv    string
	ready   chan struct{}
	granted bool
}

func newSlots(size, perConv int) *slots {
	return &slots{free: size, perConv: perConv, held: map[string]int{}}
}

// acquire waits for a slot for conv until ctx ends (its cause then).
func (s *slots) acquire(ctx context.Context, conv string) error {
	s.mu.Lock()
	if s.free > 0 && s.held[conv] < s.perConv {
		s.take(conv)
		s.mu.Unlock()
		return nil
	}
	w := &slotWaiter{conv: conv, ready: make(chan struct{})}
	s.waiting = append(s.waiting, w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.granted { // granted as ctx ended: given back
		s.giveBack(conv)
		return context.Cause(ctx)
	}
	for i, o := range s.waiting {
		if o == w {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			break
		}
	}
	return context.Cause(ctx)
}

// release gives back a slot of conv's.
func (s *slots) release(conv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.giveBack(conv)
}

func (s *slots) take(conv string) {
	s.free--
	s.held[conv]++
}

// giveBack frees conv's slot and grants the free slots to the first
// waiters whose conversation is under its share.
func (s *slots) giveBack(conv string) {
	s.free++
	if s.held[conv]--; s.held[conv] <= 0 {
		delete(s.held, conv)
	}
	for i := 0; i < len(s.waiting) && s.free > 0; {
		w := s.waiting[i]
		if s.held[w.conv] >= s.perConv {
			i++
			continue
		}
		s.take(w.conv)
		w.granted = true
		close(w.ready)
		s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
	}
}
