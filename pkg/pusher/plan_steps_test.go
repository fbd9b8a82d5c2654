package pusher

import (
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/task"
)

// The plan over many steps on one fake clock, with the conversation's
// budget (pace.Budget) on the same clock, as the step spends it: a
// progress frame with finalReserve held back, the final frame, the
// stream's close and the push with none (deliver.go). Nothing sleeps.

// TestProgressWaitsForTheBudgetToRefill: the conversation's budget spent
// down to the final frame's reserve (alice's receipt and 17 more sends
// to her at once, of other questions), progress frames wait for the
// budget's window to pass, the final frame's reserve untouched; from
// then on they go at the progress gap again. Each step's plan still says
// a frame (the budget's spend holds it), but never asks the worker for
// its text while the budget could not send what a flush would bring.
func TestProgressWaitsForTheBudgetToRefill(t *testing.T) {
	ru := testRules()
	clk := fakeclock.New(t0)
	budget := pace.New(20, time.Minute, clk.Now)
	for range 18 {
		budget.Record("alice")
	}
	r := receipt()
	var frames []time.Time
	var flushAt time.Time // when the step last asked the worker for its text
	text := ""
	for range 900 { // a version every 100 ms for a minute and a half
		clk.Step(100 * ms)
		text += "x"
		s := seeing(r, text)
		// Each version read two seconds old: stale, worth a flush when
		// the budget has room for the frame it brings.
		s.version, s.flushAt, s.room = clk.Now().Add(-2*time.Second), flushAt, budget.Remaining("alice")
		mv := plan(ru, s, clk.Now())
		switch {
		case mv.act == actHold:
			continue
		case mv.act == actFlush && s.room > finalReserve:
			flushAt = clk.Now() // the step waits for the version it asked for
			continue
		case mv.act != actFrame:
			t.Fatalf("at %s, %d sends left: %+v", clk.Now().Sub(t0), s.room, mv)
		}
		if _, ok := budget.Spend("alice", finalReserve); !ok {
			continue // the step waits for a slot
		}
		if clk.Now().Before(at(time.Minute)) {
			t.Fatalf("a progress frame at %s, the budget at its reserve until the minute", clk.Now().Sub(t0))
		}
		frames = append(frames, clk.Now())
		shown(t, r, mv.hash, clk.Now())
	}
	// From the minute on (the 18 sends out of the window): at the gap,
	// which a flush (asked, then its frame at the next step) delays a step.
	if len(frames) == 0 || frames[0].After(at(time.Minute+gap)) {
		t.Fatalf("progress frames %v: want the first within a gap of the budget's refill", frames)
	}
	if n, least := len(frames), int(30*time.Second/gap)-1; n < least {
		t.Fatalf("%d progress frames in the half minute after the refill, want at least %d", n, least)
	}
	// The budget at its reserve again: the final frame takes it.
	for budget.Remaining("alice") > finalReserve {
		budget.Record("alice")
	}
	r.Exec, r.AnswerHash = task.Succeeded, task.Hash(text)
	if mv := plan(ru, seeing(r, text), clk.Now()); mv.act != actFinal {
		t.Fatalf("the answer complete: %+v, want the final frame", mv)
	}
	if _, ok := budget.Spend("alice", 0); !ok {
		t.Fatal("the final frame found no room in the reserve")
	}
}

// TestStreamClosedAtItsWindowThenPushed: a long answer outlives WeCom's
// stream window (6 minutes from the first frame, not extended by
// updates: wecom-protocol.md): progress frames go until Margin before
// the window's end, never after; then the stream is closed with the
// content so far and the note, from the reserve if need be, and the
// answer is owed by push, which goes once the execution is over.
func TestStreamClosedAtItsWindowThenPushed(t *testing.T) {
	ru := testRules()
	clk := fakeclock.New(t0)
	budget := pace.New(20, time.Minute, clk.Now)
	budget.Record("alice") // the receipt
	rules := task.Rules{Node: "n1", Clock: clk}
	r := receipt()
	text := ""
	var closed *move
	for closed == nil {
		clk.Step(500 * ms)
		if clk.Now().After(at(ru.StreamWindow)) {
			t.Fatal("the window ended with the stream open")
		}
		text += "y"
		s := seeing(r, text)
		s.room = budget.Remaining("alice")
		switch mv := plan(ru, s, clk.Now()); mv.act {
		case actFrame:
			if !clk.Now().Before(at(ru.StreamWindow - ru.Margin)) {
				t.Fatalf("a progress frame at %s, past the window's margin", clk.Now().Sub(t0))
			}
			if _, ok := budget.Spend("alice", finalReserve); ok {
				shown(t, r, mv.hash, clk.Now())
			}
		case actClose:
			closed = &mv
		case actHold:
		default:
			t.Fatalf("at %s: %+v", clk.Now().Sub(t0), mv)
		}
	}
	if want := at(ru.StreamWindow - ru.Margin); !clk.Now().Equal(want) {
		t.Fatalf("closed at %s, want %s", clk.Now().Sub(t0), want.Sub(t0))
	}
	if !strings.HasPrefix(closed.content, text) || !strings.HasSuffix(closed.content, ru.TruncatedNote) || closed.why != "stream window closing" {
		t.Fatalf("the close: %+v", *closed)
	}
	for budget.Remaining("alice") > finalReserve { // spent down by others: the close takes the reserve
		budget.Record("alice")
	}
	if _, ok := budget.Spend("alice", 0); !ok {
		t.Fatal("the close found no room in the reserve")
	}
	if err := rules.Truncate(closed.why)(r); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	if mv := plan(ru, seeing(r, text), clk.Now()); mv.act != actHold || mv.wait != ru.ScanInterval {
		t.Fatalf("owed by push, still running: %+v, want nothing until the next scan", mv)
	}
	clk.Step(time.Minute)
	r.Exec, r.AnswerHash, r.Updated = task.Succeeded, task.Hash(text), clk.Now()
	if mv := plan(ru, seeing(r, text), clk.Now()); mv.act != actPush {
		t.Fatalf("owed by push, over: %+v, want the push", mv)
	}
}

// TestNewLeaderPushesTheStreamItCannotContinue: a new leader (term 8)
// finds alice's stream begun under term 7, its last frames perhaps sent
// and not written (shownWriteEvery). Its req_id was another connection's:
// the stream is not written again but owed by push, whether the answer is
// over or not; the answer goes once it is, and the quota counts what the
// previous leader sent and may have sent: a push that would exceed it
// waits for the window to pass them.
func TestNewLeaderPushesTheStreamItCannotContinue(t *testing.T) {
	old := testRules()
	ru := old
	ru.TermRev = 8
	// Term 7 streamed from t0, its frames written to the record up to
	// 30 s; term 8 reads it at 38 s.
	r := receipt()
	r.RecentSends = []time.Time{t0}
	for d := gap; d <= 30*time.Second; d += gap {
		if mv := plan(old, seeing(r, strings.Repeat("z", int(d/time.Second))), t0.Add(d)); mv.act != actFrame {
			t.Fatalf("term 7 at %s: %+v", d, mv)
		}
		shown(t, r, task.Hash(strings.Repeat("z", int(d/time.Second))), t0.Add(d))
	}
	clk := fakeclock.New(at(38 * time.Second))
	budget := pace.New(20, time.Minute, clk.Now)
	sends := assumedSends(r, ru.Gap, clk.Now())
	if written := len(r.RecentSends); len(sends) != written+int(8*time.Second/gap) {
		t.Fatalf("%d sends assumed, %d written: want those a gap apart up to now besides", len(sends), written)
	}
	budget.Seed("alice", sends)
	text := strings.Repeat("z", 38)
	s := seeing(r, text)
	mv := plan(ru, s, clk.Now())
	if mv.act != actHandoff || mv.why != "stream began under term 7, this is term 8" {
		t.Fatalf("term 8's first step: %+v, want the stream owed by push", mv)
	}
	if !ru.wants(sight{rec: nil}, time.Time{}, clk.Now()) {
		t.Fatal("a task rebuilt, its record not read: no step")
	}
	if err := (task.Rules{Node: "n8", Clock: clk}).Truncate(mv.why)(r); err != nil {
		t.Fatal(err)
	}
	if mv := plan(ru, seeing(r, text), clk.Now()); mv.act != actHold {
		t.Fatalf("owed by push, running: %+v, want nothing until it is over", mv)
	}
	// The previous leader's sends fill alice's minute: the push waits
	// for the oldest to leave it, no longer.
	for budget.Remaining("alice") > 0 {
		budget.Record("alice") // other questions' receipts
	}
	clk.Step(2 * time.Second)
	r.Exec, r.AnswerHash, r.Updated = task.Succeeded, task.Hash(text+"!"), clk.Now()
	if mv := plan(ru, seeing(r, text+"!"), clk.Now()); mv.act != actPush {
		t.Fatalf("owed by push, over: %+v, want the push", mv)
	}
	wait, ok := budget.Spend("alice", 0)
	if ok || wait <= 0 || wait > time.Minute {
		t.Fatalf("the push into a full minute: spent %v, wait %s", ok, wait)
	}
	clk.Step(wait)
	if _, ok := budget.Spend("alice", 0); !ok {
		t.Fatalf("the push after its wait (%s) found no room", wait)
	}
}
