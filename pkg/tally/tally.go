// Package tally is a set of counters by key, safe for concurrent use: how
// many of something each key has now (tasks per conversation, messages in
// hand per conversation). A key whose count falls to zero or below is
// dropped, so the set holds only keys with something counted.
package tally

import "sync"

// Tally counts by key. The zero value is ready to use.
type Tally struct {
	mu sync.Mutex
	n  map[string]int
}

// Add adds d (negative to remove) to key's count.
func (t *Tally) Add(key string, d int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]int{}
	}
	if t.n[key] += d; t.n[key] <= 0 {
		delete(t.n, key)
	}
}

// Get is key's count (0 if none).
func (t *Tally) Get(key string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n[key]
}
