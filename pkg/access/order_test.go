package access

import (
	"context"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
	"github.com/rs/zerolog"
)

// A message waits for the messages with files of its conversation read
// before it, and for nothing else: not for later ones, not for other
// conversations', not for one that left.
func TestGatesKeepAConversationsOrder(t *testing.T) {
	var g gates
	at := time.Unix(0, 0)
	a1, own1 := g.enter("b\x00alice", true, at)
	if len(a1) != 0 || own1 == nil {
		t.Fatalf("first message with files: ahead %d, own %v", len(a1), own1)
	}
	a2, own2 := g.enter("b\x00alice", false, at)
	if len(a2) != 1 || a2[0] != own1 || own2 != nil || !open(a2) {
		t.Fatalf("a text after it: ahead %v, own %v", a2, own2)
	}
	if b, _ := g.enter("b\x00bob", false, at); len(b) != 0 {
		t.Fatalf("another conversation waits for %d", len(b))
	}
	a3, own3 := g.enter("b\x00alice", true, at)
	if len(a3) != 1 || own3 == nil {
		t.Fatalf("more files after it: ahead %d", len(a3))
	}
	g.leave("b\x00alice", own1)
	g.leave("b\x00alice", own1) // again: nothing
	if open(a2) {
		t.Fatal("the text still waits once the files left")
	}
	if a4, _ := g.enter("b\x00alice", false, at); len(a4) != 1 || a4[0] != own3 {
		t.Fatalf("a later text waits for %v, want only the second files", a4)
	}
	g.leave("b\x00alice", own3)
	if len(g.by) != 0 {
		t.Fatalf("gates left behind: %v", g.by)
	}
}

// A message waiting for the files before it gives back its handling slot,
// goes on when they leave, and at the latest at their deadline (the
// clock's, the test's).
func TestInOrderWaitsWithoutASlotUntilTheFilesOrTheirDeadline(t *testing.T) {
	clk := fakeclock.New(time.Unix(1000, 0))
	a := &Access{cfg: Config{Clock: clk, Now: clk.Now, Timeout: time.Second}}
	for _, leaves := range []bool{true, false} {
		var g gates
		_, files := g.enter("b\x00alice", true, clk.Now().Add(time.Minute))
		ahead, _ := g.enter("b\x00alice", false, time.Time{})
		sem := make(chan struct{}, 1)
		sem <- struct{}{}
		h := &handling{a: a, ctx: context.Background(), slot: &heldSlot{sem: sem}, in: arrival{ahead: ahead}, log: zerolog.Nop()}
		done := make(chan struct{})
		go func() { defer close(done); h.inOrder() }()
		clk.AwaitWaiters(t, 1)
		if len(sem) != 0 {
			t.Fatal("the slot is held while the message waits")
		}
		select {
		case <-done:
			t.Fatal("the message went on before the files left or their deadline")
		default:
		}
		if leaves {
			g.leave("b\x00alice", files)
		} else {
			clk.Step(time.Minute)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("the message still waits (files left: %v)", leaves)
		}
		h.cancel()
	}
}
