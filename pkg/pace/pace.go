// Package pace keeps each conversation under its send budget: WeCom caps
// how often one conversation may be written to, and replies and proactive
// pushes share that quota. A Budget counts every send to a conversation
// over a sliding window, and lets the sender keep a reserve so that the
// frames that matter (the first and the final one) are never starved by
// progress updates.
package pace

import (
	"slices"
	"sync"
	"time"
)

// Budget is a per-conversation sliding-window send budget. Safe for
// concurrent use.
type Budget struct {
	limit  int
	window time.Duration
	now    func() time.Time // the clock (New's argument: a test seam); time.Now by default

	mu      sync.Mutex
	sends   map[string][]time.Time // per conversation, oldest first
	sweptAt time.Time              // last time every idle conversation was forgotten
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

// prune drops sends older than the window; the caller holds mu. Once a
// window it forgets every conversation idle for a window, so a bot that
// talked to a million people once does not keep them all in memory.
func (b *Budget) prune(chat string, now time.Time) []time.Time {
	if now.Sub(b.sweptAt) >= b.window {
		b.sweptAt = now
		for c, s := range b.sends {
			if len(s) == 0 || now.Sub(s[len(s)-1]) >= b.window {
				delete(b.sends, c)
			}
		}
	}
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
	_, ok := b.Spend(chat, reserve)
	return ok
}

// Spend is the sender's one way to use the budget: it spends one send if
// more than reserve remain (ok), or else says how long until the
// conversation's next send slot frees (0 when one is free but held in
// reserve: a send without reserve may take it). The sender waits that
// long and asks again.
func (b *Budget) Spend(chat string, reserve int) (wait time.Duration, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	s := b.prune(chat, now)
	if b.limit-len(s) > reserve {
		b.sends[chat] = append(s, now)
		return 0, true
	}
	return b.free(s, now).Sub(now), false
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

// Seed tells the budget of sends another node made to the conversation
// (a previous leader, from the task record), so that a new leader does
// not spend WeCom's quota twice in one window. A conversation this budget
// already counts sends for is left as it is: this node made them.
func (b *Budget) Seed(chat string, sends []time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if len(b.prune(chat, now)) > 0 {
		return
	}
	var s []time.Time
	for _, t := range sends {
		if now.Sub(t) < b.window && !t.After(now) {
			s = append(s, t)
		}
	}
	if len(s) == 0 {
		return
	}
	slices.SortFunc(s, func(a, c time.Time) int { return a.Compare(c) })
	b.sends[chat] = s
}

// Free is when the conversation's next send slot frees (now if one is free).
func (b *Budget) Free(chat string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	return b.free(b.prune(chat, now), now)
}

// free is when the next send slot frees, given the sends s in the window
// at now; the caller holds mu.
func (b *Budget) free(s []time.Time, now time.Time) time.Time {
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
