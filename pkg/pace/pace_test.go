package pace

import (
	"fmt"
	"testing"
	"time"
)

func TestSlidingWindowWithReserve(t *testing.T) {
	now := time.Unix(1000, 0)
	b := New(3, time.Minute, func() time.Time { return now })
	for i := range 2 {
		if !b.Take("a", 1) {
			t.Fatalf("progress send %d refused", i)
		}
	}
	if b.Take("a", 1) {
		t.Fatal("progress send took the reserved slot")
	}
	if !b.Take("a", 0) {
		t.Fatal("final send refused while a slot was reserved for it")
	}
	if b.Take("a", 0) || b.Remaining("a") != 0 {
		t.Fatal("over the limit")
	}
	if !b.Take("b", 0) {
		t.Fatal("conversations share a budget")
	}
	if got := b.Free("a"); !got.Equal(now.Add(time.Minute)) {
		t.Fatalf("free at %v", got)
	}
	now = now.Add(time.Minute)
	if b.Remaining("a") != 3 {
		t.Fatalf("window did not slide: %d", b.Remaining("a"))
	}
	b.Record("a")
	b.Refund("a")
	if b.Remaining("a") != 3 {
		t.Fatal("refund")
	}
	now = now.Add(2 * time.Minute)
	b.Remaining("b")
	if b.Conversations() != 0 {
		t.Fatal("idle conversations not pruned")
	}
}

// Conversations idle for a window are forgotten, not kept for ever.
func TestIdleConversationsForgotten(t *testing.T) {
	now := time.Unix(1700000000, 0)
	b := New(20, time.Minute, func() time.Time { return now })
	for i := range 1000 {
		b.Record(fmt.Sprintf("user%d", i))
	}
	if n := b.Conversations(); n != 1000 {
		t.Fatalf("conversations = %d", n)
	}
	now = now.Add(2 * time.Minute)
	b.Take("someone new", 0)
	if n := b.Conversations(); n != 1 {
		t.Fatalf("after two idle windows: %d conversations remembered, want 1", n)
	}
}

// A new leader seeds a conversation's budget with what the previous leader
// sent in the window, so the two together stay under the quota; a
// conversation this node already counts is left alone.
func TestSeedFromPreviousLeader(t *testing.T) {
	now := time.Unix(1700000000, 0)
	b := New(20, time.Minute, func() time.Time { return now })
	var sent []time.Time
	for i := range 18 {
		sent = append(sent, now.Add(-50*time.Second+time.Duration(i)*time.Second))
	}
	sent = append(sent, now.Add(-2*time.Minute)) // outside the window: ignored
	b.Seed("alice", sent)
	if r := b.Remaining("alice"); r != 2 {
		t.Fatalf("remaining after seeding 18 sends = %d, want 2", r)
	}
	b.Record("bob")
	b.Seed("bob", sent)
	if r := b.Remaining("bob"); r != 19 {
		t.Fatalf("seeding a counted conversation changed it: remaining %d", r)
	}
	now = now.Add(10 * time.Second) // the first seeded send leaves the window
	if r := b.Remaining("alice"); r != 3 {
		t.Fatalf("remaining = %d, want 3", r)
	}
}

// Spend spends like Take, and when it cannot says how long until the next
// slot frees: 0 while a slot is free but held in reserve.
func TestSpendSaysHowLongToWait(t *testing.T) {
	now := time.Unix(1000, 0)
	b := New(3, time.Minute, func() time.Time { return now })
	for i := range 2 {
		if wait, ok := b.Spend("a", 1); !ok || wait != 0 {
			t.Fatalf("progress send %d: ok %v, wait %s", i, ok, wait)
		}
		now = now.Add(10 * time.Second)
	}
	if wait, ok := b.Spend("a", 1); ok || wait != 0 {
		t.Fatalf("progress send into the reserve: ok %v, wait %s (want refused, a slot free now)", ok, wait)
	}
	if _, ok := b.Spend("a", 0); !ok {
		t.Fatal("final send refused while a slot was reserved for it")
	}
	// Sends at 0 s, 10 s, 20 s; now 20 s: the first frees at 60 s.
	if wait, ok := b.Spend("a", 0); ok || wait != 40*time.Second {
		t.Fatalf("over the limit: ok %v, wait %s (want 40s)", ok, wait)
	}
	now = now.Add(40 * time.Second)
	if _, ok := b.Spend("a", 0); !ok {
		t.Fatal("no send once the oldest left the window")
	}
}

// A budget under two caps keeps under both: a conversation within its
// minute is still held once its hour is spent, the reserve holds under
// each cap, and the wait is until the hour's oldest send leaves.
func TestMinuteAndHourCaps(t *testing.T) {
	now := time.Unix(1700000000, 0)
	b := New(20, time.Minute, func() time.Time { return now }).AndAtMost(50, time.Hour)
	start := now
	sent := 0
	for sent < 50 {
		if _, ok := b.Spend("a", 0); !ok {
			now = now.Add(time.Minute) // the minute is full: the next one
			continue
		}
		sent++
	}
	if r := b.Remaining("a"); r != 0 {
		t.Fatalf("remaining after the hour's 50: %d", r)
	}
	now = now.Add(time.Minute) // a fresh minute, the same hour
	wait, ok := b.Spend("a", 0)
	if ok {
		t.Fatal("a send past the hour's cap")
	}
	if want := start.Add(time.Hour).Sub(now); wait != want {
		t.Fatalf("wait %s, want %s (until the hour's first send leaves)", wait, want)
	}
	if !b.Free("a").Equal(start.Add(time.Hour)) {
		t.Fatalf("free at %v", b.Free("a"))
	}
	if !b.Take("b", 0) {
		t.Fatal("conversations share the hour")
	}
	now = start.Add(time.Hour)
	if _, ok := b.Spend("a", 0); !ok {
		t.Fatal("no send once the hour's first left")
	}
	// The reserve holds under the hour too: with one send left in the
	// hour, a progress frame (reserve 1) is refused, a final frame is not.
	h := New(20, time.Minute, func() time.Time { return now }).AndAtMost(3, time.Hour)
	h.Take("c", 0)
	h.Take("c", 0)
	if h.Take("c", 1) {
		t.Fatal("progress took the hour's reserved slot")
	}
	if !h.Take("c", 0) {
		t.Fatal("final frame refused while the hour's last slot was reserved for it")
	}
	if len(b.Caps()) != 2 || b.Limit() != 20 || b.Window() != time.Minute {
		t.Fatalf("caps %v", b.Caps())
	}
}

// A 45009 lowers the conversation's rate: each refusal halves its minute
// cap (not below 1; the hour's is left), only for that conversation, until
// an hour (the longest window) passes without a refusal.
func TestRefusedLowersTheConversation(t *testing.T) {
	now := time.Unix(1700000000, 0)
	b := New(20, time.Minute, func() time.Time { return now }).AndAtMost(900, time.Hour)
	for range 8 {
		b.Take("a", 0)
	}
	b.Refused("a")
	if r := b.Remaining("a"); r != 2 {
		t.Fatalf("remaining after a refusal at 8 sent: %d, want 10-8", r)
	}
	if r := b.Remaining("b"); r != 20 {
		t.Fatalf("another conversation lowered: %d", r)
	}
	b.Refused("a")
	if r := b.Remaining("a"); r != -3 {
		t.Fatalf("remaining after two refusals: %d, want 5-8", r)
	}
	if wait, ok := b.Spend("a", 0); ok || wait != time.Minute {
		t.Fatalf("lowered below its sends: ok %v, wait %s (want a minute: every send of the minute must leave)", ok, wait)
	}
	for range 10 {
		b.Refused("a")
	}
	now = now.Add(time.Minute)
	if r := b.Remaining("a"); r != 1 {
		t.Fatalf("lowered below 1: remaining %d in a fresh minute", r)
	}
	now = now.Add(time.Hour)
	if r := b.Remaining("a"); r != 20 {
		t.Fatalf("an hour without a refusal: remaining %d, want 20", r)
	}
}

// Seed keeps the sends of the longest window, so a new leader's hour
// counts what the records hold of the previous leader's.
func TestSeedKeepsTheHour(t *testing.T) {
	now := time.Unix(1700000000, 0)
	b := New(20, time.Minute, func() time.Time { return now }).AndAtMost(30, time.Hour)
	var sent []time.Time
	for i := range 25 {
		sent = append(sent, now.Add(-50*time.Minute+time.Duration(i)*time.Minute))
	}
	b.Seed("alice", sent)
	if r := b.Remaining("alice"); r != 5 {
		t.Fatalf("remaining after seeding 25 sends of the hour: %d, want 5", r)
	}
}
