// Package pace keeps each conversation under its send budget: WeCom caps
// how often one conversation may be written to, and replies and proactive
// pushes share that quota. A Budget counts every send to a conversation
// over a sliding window, and lets the sender keep a reserve so that the
// frames that matter (the first and the final one) are never starved by
// progress updates.
package pace

import (
	"sync"
	"time"
)

// Budget is a per-conversation sliding-window send budget. Safe for
// concurrent use.
type Budget struct {
	limit  int
	window time.Duration
	now    func() time.Time

	mu    sync.Mutex
	sends map[string][]time.Time // per conversation, oldest first
}

// New allows limit sends per window per conversation (e.g. 20 per minute,
// under WeCom's 30). now defaults to time.Now.
func New(limit int, window time.Duration, now func() time.Time) *Budget {
	if now == nil {
		now = time.Now
	}
	return &Budget{limit: limit, window: window, now: now, sends: map[string][]time.Time{}}
}

// Limit is the sends allowed per window.
func (b *Budget) Limit() int { return b.limit }

// prune drops sends older than the window; the caller holds mu.
func (b *Budget) prune(chat string, now time.Time) []time.Time {
	s := b.sends[chat]
	i := 0
	for i < len(s) && now.Sub(s[i]) >= b.window {
		i++
	}
	s = s[i:]
	if len(s) == 0 {
		delete(b.sends, chat)
		return nil
	}
	b.sends[chat] = s
	return s
}

// Remaining is how many sends the conversation may still make now.
func (b *Budget) Remaining(chat string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.limit - len(b.prune(chat, b.now()))
}

// Take spends one send if more than reserve remain, and reports whether it
// did. Progress updates take with a reserve; final frames with none.
func (b *Budget) Take(chat string, reserve int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	s := b.prune(chat, now)
	if b.limit-len(s) <= reserve {
		return false
	}
	b.sends[chat] = append(s, now)
	return true
}

// Refund gives back a send that was not accepted by WeCom (a refused frame
// does not count against the real quota either).
func (b *Budget) Refund(chat string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sends[chat]; len(s) > 0 {
		b.sends[chat] = s[:len(s)-1]
	}
}

// Record counts a send that had to go out whatever the budget (a receipt,
// a refusal), so that later sends account for it.
func (b *Budget) Record(chat string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sends[chat] = append(b.prune(chat, b.now()), b.now())
}

// Free is when the conversation's next send slot frees (now if one is free).
func (b *Budget) Free(chat string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	s := b.prune(chat, now)
	if len(s) < b.limit {
		return now
	}
	return s[len(s)-b.limit].Add(b.window)
}

// Conversations is how many conversations have sends in the window.
func (b *Budget) Conversations() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sends)
}
