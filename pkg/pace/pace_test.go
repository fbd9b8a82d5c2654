package pace

import (
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
