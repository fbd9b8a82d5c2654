// Package pace keeps each conversation under its send budget: WeCom caps
// how often one conversation may be written to (30 frames a minute and
// 1,000 an hour, by integrations quoting its documentation), and replies
// and proactive pushes share that quota. A Budget counts every send to a
// conversation over one sliding window per cap (New, AndAtMost), and lets
// the sender keep a reserve so that the frames that matter (the first and
// the final one) are never starved by progress updates.
//
// What a Budget guarantees: a sender that spends before every send never
// goes over any of its caps, whatever WeCom answers. It never relies on
// seeing a refusal, because WeCom may not send one: a frame over the
// quota may be acked and silently dropped. What it does not know: sends
// made by another process with the same bot, and, after a failover, what
// the previous leader sent more than a minute ago (Seed is fed from the
// task records, which keep a minute of sends); keep the caps under
// WeCom's with a margin for both.
//
// When WeCom does refuse (45009), Refused lowers the conversation's rate:
// whatever botctl counted, WeCom counted more.
package pace

import (
	"slices"
	"sort"
	"sync"
	"time"
)

// Cap is one limit: at most Limit sends in any sliding Window.
type Cap struct {
	Limit  int
	Window time.Duration
}

// Budget is a per-conversation sliding-window send budget under one or
// more caps. Safe for concurrent use.
type Budget struct {
	caps []Cap            // the first is the fast one (Limit, Window); set before use
	now  func() time.Time // the clock (New's argument: a test seam); time.Now by default

	mu      sync.Mutex
	sends   map[string][]time.Time // per conversation, oldest first, within the longest window
	lowered map[string]lowering    // conversations WeCom refused (Refused)
	sweptAt time.Time              // last time every idle conversation was forgotten
}

// lowering is how far a conversation's caps are lowered after refusals:
// halved times, until a longest window passes after the last refusal at.
type lowering struct {
	halved int
	at     time.Time
}

// New allows limit sends per window per conversation (e.g. 20 per minute,
// under WeCom's 30). now defaults to time.Now. AndAtMost adds caps.
func New(limit int, window time.Duration, now func() time.Time) *Budget {
	if now == nil {
		now = time.Now
	}
	return &Budget{caps: []Cap{{limit, window}}, now: now,
		sends: map[string][]time.Time{}, lowered: map[string]lowering{}}
}

// AndAtMost adds a cap every conversation is kept under too (e.g. 900 an
// hour, under WeCom's 1,000), and returns b. Call it before b is used. A
// cap with a non-positive limit or window is ignored.
func (b *Budget) AndAtMost(limit int, window time.Duration) *Budget {
	if limit > 0 && window > 0 {
		b.caps = append(b.caps, Cap{limit, window})
	}
	return b
}

// Limit is the sends allowed per Window, of the first cap (New's).
func (b *Budget) Limit() int { return b.caps[0].Limit }

// Window is the first cap's window (New's).
func (b *Budget) Window() time.Duration { return b.caps[0].Window }

// Caps are the budget's caps, New's first.
func (b *Budget) Caps() []Cap { return slices.Clone(b.caps) }

// longest is the longest window of the caps.
func (b *Budget) longest() time.Duration {
	w := time.Duration(0)
	for _, c := range b.caps {
		w = max(w, c.Window)
	}
	return w
}

// prune drops sends older than the longest window; the caller holds mu.
// Once a first cap's window it forgets every conversation idle for the
// longest window, so a bot that talked to a million people once does not
// keep them all in memory.
func (b *Budget) prune(chat string, now time.Time) []time.Time {
	longest := b.longest()
	if now.Sub(b.sweptAt) >= b.caps[0].Window {
		b.sweptAt = now
		for c, s := range b.sends {
			if len(s) == 0 || now.Sub(s[len(s)-1]) >= longest {
				delete(b.sends, c)
			}
		}
		for c, l := range b.lowered {
			if now.Sub(l.at) >= longest {
				delete(b.lowered, c)
			}
		}
	}
	s := b.sends[chat]
	i := 0
	for i < len(s) && now.Sub(s[i]) >= longest {
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

// limit is the limit of cap i for chat now: the first cap's lowered
// after refusals (never below 1); the caller holds mu.
func (b *Budget) limit(chat string, i int, now time.Time) int {
	c := b.caps[i]
	l, ok := b.lowered[chat]
	if !ok || i > 0 {
		return c.Limit
	}
	if now.Sub(l.at) >= b.longest() {
		delete(b.lowered, chat)
		return c.Limit
	}
	return max(c.Limit>>min(l.halved, 30), 1)
}

// inWindow is the sends of s (oldest first) within window at now.
func inWindow(s []time.Time, window time.Duration, now time.Time) []time.Time {
	i := sort.Search(len(s), func(i int) bool { return now.Sub(s[i]) < window })
	return s[i:]
}

// room is how many more sends chat may make now under every cap (its
// fewest), and when the next slot frees under all of them (now if one
// is free); the caller holds mu and passes prune's s.
func (b *Budget) room(chat string, s []time.Time, now time.Time) (left int, free time.Time) {
	free = now
	for i, c := range b.caps {
		w := inWindow(s, c.Window, now)
		l := b.limit(chat, i, now)
		if n := l - len(w); i == 0 || n < left {
			left = n
		}
		if len(w) >= l {
			if t := w[len(w)-l].Add(c.Window); t.After(free) {
				free = t
			}
		}
	}
	return left, free
}

// Remaining is how many sends the conversation may still make now.
func (b *Budget) Remaining(chat string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	left, _ := b.room(chat, b.prune(chat, now), now)
	return left
}

// Take spends one send if more than reserve remain, and reports whether it
// did. Progress updates take with a reserve; final frames with none.
func (b *Budget) Take(chat string, reserve int) bool {
	_, ok := b.Spend(chat, reserve)
	return ok
}

// Spend is the sender's one way to use the budget: it spends one send if
// more than reserve remain under every cap (ok), or else says how long
// until the conversation's next send slot frees under all of them (0 when
// one is free but held in reserve: a send without reserve may take it).
// The sender waits that long and asks again.
func (b *Budget) Spend(chat string, reserve int) (wait time.Duration, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	s := b.prune(chat, now)
	left, free := b.room(chat, s, now)
	if left > reserve {
		b.sends[chat] = append(s, now)
		return 0, true
	}
	return free.Sub(now), false
}

// Refund gives back a send that was not accepted by WeCom (a refused frame
// does not count against the real quota either). Not for a 45009: see
// Refused.
func (b *Budget) Refund(chat string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sends[chat]; len(s) > 0 {
		b.sends[chat] = s[:len(s)-1]
	}
}

// Refused hears that WeCom refused a send to chat for its quota (45009):
// WeCom counted more than this budget did (another sender, a previous
// leader's sends the records no longer hold, a quota lower than assumed).
// The send stays counted, and the conversation's first cap (the minute's)
// is halved, down to 1, for every refusal, until the longest window passes
// without one: the conversation sends slower, its final frames still go.
// The longer caps are not lowered: halving an hour's cap would hold a
// final frame for up to an hour, when the refusal was most likely the
// minute's.
func (b *Budget) Refused(chat string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	l := b.lowered[chat]
	if now.Sub(l.at) >= b.longest() {
		l.halved = 0
	}
	l.halved++
	l.at = now
	b.lowered[chat] = l
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
	longest := b.longest()
	var s []time.Time
	for _, t := range sends {
		if now.Sub(t) < longest && !t.After(now) {
			s = append(s, t)
		}
	}
	if len(s) == 0 {
		return
	}
	slices.SortFunc(s, func(a, c time.Time) int { return a.Compare(c) })
	b.sends[chat] = s
}

// Free is when the conversation's next send slot frees under every cap
// (now if one is free).
func (b *Budget) Free(chat string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	_, free := b.room(chat, b.prune(chat, now), now)
	return free
}

// Conversations is how many conversations have sends in the window.
func (b *Budget) Conversations() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sends)
}
