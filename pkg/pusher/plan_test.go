package pusher

import (
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
)

// The step's plan, one synchronous step each, at explicit times: no
// connection, no store, no clock but the one a test steps. The tests over
// real NATS (pusher_test.go) keep what a user ends with; when each frame
// goes is decided here, and tested here.

// t0 is the receipt of alice's question, its stream's first frame.
var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const ms = time.Millisecond

// testRules are Config's defaults (a 20-a-minute budget: a progress gap
// of 60 s / 18), for term 7, with a scan every 10 s so that the waits
// the plan computes show below it.
func testRules() rules {
	c := Config{TermRev: 7, Budget: pace.New(20, time.Minute, nil), ScanInterval: 10 * time.Second}
	c.setDefaults()
	return c.rules()
}

// gap is the progress gap at 20 sends a minute.
var gap = ProgressGap(20)

// receipt is the record of alice's task after the inbound path's
// receipt at t0, running on node n2 under term 7.
func receipt() *task.Record {
	return &task.Record{ID: "t1", Bot: "b", Chat: "alice", TermRev: 7, ReqID: "req", StreamID: "s1",
		Received: t0, Exec: task.Running, Delivery: task.Streaming, Attempt: 1, Node: "n2",
		StreamStart: t0, PushedAt: t0, PushedHash: task.Hash("已收到，正在处理…")}
}

// seeing is the sight of r with text as its output (no thinking shown),
// the conversation's budget untouched.
func seeing(r *task.Record, text string) sight {
	return sight{rec: r, text: text, view: text, viewHash: task.Hash(text), room: 20, acked: r.PushedParts}
}

func TestPlan(t *testing.T) {
	ru := testRules()
	heartbeat := func(el string) string { return "已进行 " + el + "，仍在处理中" }
	cases := []struct {
		name  string
		now   time.Time
		rules func(*rules)
		rec   func(*task.Record)
		sight func(*sight)
		text  string
		want  move
	}{
		// Progress: new content, paced at the progress gap.
		{name: "new content a progress gap after the receipt: a frame showing it",
			now: t0.Add(gap), text: "v0",
			want: move{act: actFrame, content: "v0", changed: true, hash: task.Hash("v0"), settled: true}},
		{name: "new content within the progress gap of the last frame: held for the rest of the gap",
			now: at(time.Second), text: "v0",
			want: move{act: actHold, wait: gap - time.Second}},
		{name: "a held frame waits at most a scan interval",
			now: at(time.Second), text: "v0", rules: func(ru *rules) { ru.ScanInterval = time.Second },
			want: move{act: actHold, wait: time.Second}},
		// TestUnchangedContentSendsNoFrame: content the user has seen
		// sends nothing; the task is looked at again at the scan interval,
		// or at its window's close if sooner.
		{name: "content the user has seen: nothing until the next scan",
			now: at(5 * time.Second), text: "partial", rec: func(r *task.Record) { r.PushedHash = task.Hash("partial") },
			want: move{act: actHold, wait: 10 * time.Second}},
		{name: "content the user has seen, the window's close sooner than the scan: nothing until the close",
			now: at(5*time.Minute + 25*time.Second), text: "partial", rec: func(r *task.Record) { r.PushedHash = task.Hash("partial") },
			sight: func(s *sight) { s.shownAt = at(5*time.Minute + 20*time.Second) },
			want:  move{act: actHold, wait: 5 * time.Second}},
		{name: "no output yet and the receipt shown: nothing",
			now:  at(5 * time.Second),
			want: move{act: actHold, wait: 10 * time.Second}},

		// TestHeartbeatStatusLine: nothing new for Heartbeat (20 s), the
		// content so far with the time elapsed.
		{name: "nothing new for the heartbeat: the content so far and the status line",
			now: at(20 * time.Second), text: "first thoughts", rec: func(r *task.Record) { r.PushedHash = task.Hash("first thoughts") },
			want: move{act: actFrame, content: "first thoughts\n\n" + heartbeat("0 分 20 秒")}},
		{name: "a heartbeat is not due a millisecond before",
			now: at(20*time.Second - ms), text: "first thoughts", rec: func(r *task.Record) { r.PushedHash = task.Hash("first thoughts") },
			want: move{act: actHold, wait: 10 * time.Second}},
		{name: "the heartbeat counts from this pusher's last new content when it is later than the record's",
			now: at(20 * time.Second), text: "first thoughts", rec: func(r *task.Record) { r.PushedHash = task.Hash("first thoughts") },
			sight: func(s *sight) { s.shownAt = at(5 * time.Second) },
			want:  move{act: actHold, wait: 10 * time.Second}},
		{name: "the status line counts from the question's receipt, in minutes and seconds",
			now: at(2*time.Minute + 5*time.Second), text: "first thoughts",
			rec: func(r *task.Record) {
				r.PushedHash, r.PushedAt = task.Hash("first thoughts"), at(time.Minute+40*time.Second)
			},
			want: move{act: actFrame, content: "first thoughts\n\n" + heartbeat("2 分 05 秒")}},
		// TestQueuedStatusLine: waiting for a worker, the user is told so;
		// once it ran (an attempt begun), the usual line.
		{name: "queued for its first worker slot: the queued line",
			now: at(20 * time.Second), rec: func(r *task.Record) { r.Exec, r.Attempt, r.Node = task.Queued, 0, "" },
			want: move{act: actFrame, content: "排队中，已等待 0 分 20 秒，马上轮到你"}},
		{name: "queued again after an attempt: the usual line",
			now: at(20 * time.Second), rec: func(r *task.Record) { r.Exec = task.Queued },
			want: move{act: actFrame, content: heartbeat("0 分 20 秒")}},

		// TestHeldFrameShowsTheTextAFlushBrings,
		// TestUnansweredFlushCostsOneWait,
		// TestVersionFromAWorkerClockBehindIsShownWithoutAFlush: a frame
		// about to show a version older than a second asks its worker for
		// the text first, once per progress gap.
		{name: "a version a second old, read: ask the worker first",
			now: at(10 * time.Second), text: "v1", sight: func(s *sight) { s.version = at(9 * time.Second) },
			want: move{act: actFlush, wait: flushWait, content: "v1", changed: true, hash: task.Hash("v1")}},
		{name: "a version just under a second old: the frame",
			now: at(10 * time.Second), text: "v1", sight: func(s *sight) { s.version = at(9*time.Second + ms) },
			want: move{act: actFrame, content: "v1", changed: true, hash: task.Hash("v1"), settled: true}},
		{name: "a stale version watched a second ago: ask",
			now: at(10 * time.Second), text: "v1", sight: func(s *sight) { s.version, s.watchedAt = at(5*time.Second), at(9*time.Second) },
			want: move{act: actFlush, wait: flushWait, content: "v1", changed: true, hash: task.Hash("v1")}},
		{name: "stamped a minute ago by a worker's clock behind, watched just now: the frame",
			now: at(10 * time.Second), text: "v1", sight: func(s *sight) { s.version, s.watchedAt = at(-50*time.Second), at(10*time.Second-100*ms) },
			want: move{act: actFrame, content: "v1", changed: true, hash: task.Hash("v1"), settled: true}},
		{name: "a stale version asked for within the progress gap: the frame shows what it has",
			now: at(10 * time.Second), text: "v1",
			sight: func(s *sight) { s.version, s.flushAt = at(5*time.Second), at(10*time.Second-gap+ms) },
			want:  move{act: actFrame, content: "v1", changed: true, hash: task.Hash("v1"), settled: true}},
		{name: "a stale version last asked for a progress gap ago: ask again",
			now: at(10 * time.Second), text: "v1",
			sight: func(s *sight) { s.version, s.flushAt = at(5*time.Second), at(10*time.Second-gap) },
			want:  move{act: actFlush, wait: flushWait, content: "v1", changed: true, hash: task.Hash("v1")}},
		{name: "a stale version with only the reserve left in the budget: the frame, not asked (the budget holds it)",
			now: at(10 * time.Second), text: "v1", sight: func(s *sight) { s.version, s.room = at(5*time.Second), finalReserve },
			want: move{act: actFrame, content: "v1", changed: true, hash: task.Hash("v1")}},
		{name: "a stale version of a record naming no worker node: the frame",
			now: at(10 * time.Second), text: "v1", rec: func(r *task.Record) { r.Node = "" },
			sight: func(s *sight) { s.version = at(5 * time.Second) },
			want:  move{act: actFrame, content: "v1", changed: true, hash: task.Hash("v1"), settled: true}},
		{name: "a heartbeat never asks",
			now: at(20 * time.Second), text: "v1", rec: func(r *task.Record) { r.PushedHash = task.Hash("v1") },
			sight: func(s *sight) { s.version = at(time.Second) },
			want:  move{act: actFrame, content: "v1\n\n" + heartbeat("0 分 20 秒")}},
		{name: "a text too long for a frame is clipped",
			now: at(10 * time.Second), text: strings.Repeat("x", wecom.MaxContentBytes),
			want: move{act: actFrame, content: strings.Repeat("x", wecom.MaxContentBytes-200-len("…")) + "…", changed: true,
				hash: task.Hash(strings.Repeat("x", wecom.MaxContentBytes)), settled: true}},

		// TestWindowTruncatesThenPushesSplit: the stream is closed Margin
		// (30 s) before its window (6 min) ends, with the content so far
		// and the note; the answer is then owed by push.
		{name: "the window's margin reached: the stream closed with the content so far and the note",
			now: at(5*time.Minute + 30*time.Second), text: "para",
			want: move{act: actClose, why: "stream window closing", content: "para\n\n（回答较长，完整内容稍后单独发送）"}},
		{name: "a millisecond before the margin: still progress",
			now: at(5*time.Minute + 30*time.Second - ms), text: "para",
			want: move{act: actFrame, content: "para", changed: true, hash: task.Hash("para"), settled: true}},
		// TestHandoverClosesOpenStreamsAndTheAnswerFollowsOnce.
		{name: "handing over: the stream closed with the handover note",
			now: at(10 * time.Second), text: "half", sight: func(s *sight) { s.handingOver = true },
			want: move{act: actClose, why: "handover: the leader stopped", content: "half\n\n（服务切换中，完整回答稍后单独发送）"}},
		{name: "handing over a queued task: the note alone",
			now: at(10 * time.Second), rec: func(r *task.Record) { r.Exec = task.Queued }, sight: func(s *sight) { s.handingOver = true },
			want: move{act: actClose, why: "handover: the leader stopped", content: "（服务切换中，完整回答稍后单独发送）"}},

		// The final frame: once the execution is over, never paced.
		{name: "the execution over: the final frame, however recent the last frame",
			now: at(time.Second), text: "answer",
			rec: func(r *task.Record) {
				r.Exec, r.AnswerHash, r.PushedAt = task.Succeeded, task.Hash("answer"), at(time.Second)
			},
			want: move{act: actFinal}},
		{name: "the execution over within the window's margin: the final frame, not the close",
			now: at(5*time.Minute + 45*time.Second), text: "answer",
			rec:  func(r *task.Record) { r.Exec, r.AnswerHash = task.Succeeded, task.Hash("answer") },
			want: move{act: actFinal}},
		{name: "failed: the final frame (the failure's note)",
			now: at(time.Second), rec: func(r *task.Record) { r.Exec = task.Failed },
			want: move{act: actFinal}},
		{name: "the output read is not the recorded answer yet: wait for it, briefly",
			now: at(time.Second), text: "ans",
			rec:  func(r *task.Record) { r.Exec, r.AnswerHash = task.Succeeded, task.Hash("answer") },
			want: move{act: actAwaitAnswer, wait: answerWait}},

		// TestFailoverMidStreamCompletesOnce, TestAmbiguousFinalCountedAndDelivered:
		// a stream this connection cannot write is owed by push.
		{name: "a stream begun under another term: owed by push",
			now: at(time.Second), rec: func(r *task.Record) { r.TermRev = 6 },
			want: move{act: actHandoff, why: "stream began under term 6, this is term 7"}},
		{name: "no stream to write (its receipt refused): owed by push",
			now: at(time.Second), rec: func(r *task.Record) { r.StreamID = "" },
			want: move{act: actHandoff, why: "stream began under term 7, this is term 7"}},
		{name: "the window over: owed by push",
			now: at(6 * time.Minute), rec: func(r *task.Record) { r.Exec = task.Succeeded },
			want: move{act: actHandoff, why: "stream began under term 7, this is term 7"}},

		// Owed by push: the complete answer, once the execution is over.
		{name: "owed by push, still running: nothing until the next scan",
			now: at(time.Minute), rec: func(r *task.Record) { r.Delivery = task.Truncated },
			want: move{act: actHold, wait: 10 * time.Second}},
		{name: "owed by push and over: pushed",
			now: at(time.Minute), rec: func(r *task.Record) {
				r.Delivery, r.Exec, r.Updated = task.Truncated, task.Succeeded, at(50*time.Second)
			},
			want: move{act: actPush}},
		// TestAckedPartWhoseCountWasNotWrittenIsNotPushedAgain.
		{name: "parts acked the record does not count: the count written first",
			now: at(time.Minute), rec: func(r *task.Record) { r.Delivery, r.Exec, r.PushedParts = task.Truncated, task.Succeeded, 1 },
			sight: func(s *sight) { s.acked = 2 },
			want:  move{act: actRecount, parts: 2}},
		// TestAnswerPastReplayExpiryIsNotSentLate: an answer owed longer
		// than ReplayExpiry (24 h) since its execution ended, nothing of
		// it sent, is not sent late.
		{name: "owed past the replay expiry, nothing sent: not sent late",
			now: at(24*time.Hour + time.Minute + ms), rec: func(r *task.Record) { r.Delivery, r.Exec, r.Updated = task.Truncated, task.Succeeded, at(time.Minute) },
			want: move{act: actExpire, owedFor: 24*time.Hour + ms}},
		{name: "owed exactly the replay expiry: pushed",
			now: at(24*time.Hour + time.Minute), rec: func(r *task.Record) { r.Delivery, r.Exec, r.Updated = task.Truncated, task.Succeeded, at(time.Minute) },
			want: move{act: actPush}},
		{name: "owed past the replay expiry with a part sent: the rest pushed",
			now: at(48 * time.Hour), rec: func(r *task.Record) {
				r.Delivery, r.Exec, r.Updated, r.PushedParts = task.Truncated, task.Succeeded, at(time.Minute), 1
			},
			want: move{act: actPush}},
		{name: "a reopened delivery of another term, over: handed off first",
			now: at(48 * time.Hour), rec: func(r *task.Record) { r.Delivery, r.Exec, r.TermRev = task.Pending, task.Succeeded, 3 },
			want: move{act: actHandoff, why: "stream began under term 3, this is term 7"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := receipt()
			if tc.rec != nil {
				tc.rec(r)
			}
			s := seeing(r, tc.text)
			if tc.sight != nil {
				tc.sight(&s)
			}
			ru := ru
			if tc.rules != nil {
				tc.rules(&ru)
			}
			if got := plan(ru, s, tc.now); got != tc.want {
				t.Fatalf("plan at %s:\n got %+v\nwant %+v", tc.now.Sub(t0), got, tc.want)
			}
		})
	}
}

// needsStep's decision: a scan steps a task only when the plan could do
// something, read from the cache.
func TestWants(t *testing.T) {
	ru := testRules()
	cases := []struct {
		name   string
		now    time.Time
		readAt time.Time
		rec    func(*task.Record)
		none   bool // no record cached
		text   string
		want   bool
	}{
		{name: "no record cached: a read", none: true, now: at(time.Second), want: true},
		{name: "a record read refreshEvery ago: read again", now: at(refreshEvery), readAt: t0, want: true},
		{name: "the execution over: the final frame or the push", now: at(time.Second),
			rec: func(r *task.Record) { r.Exec = task.Succeeded }, want: true},
		// TestUnchangedContentSendsNoFrame.
		{name: "content the user has seen, no heartbeat due: no step", now: at(5 * time.Second), text: "partial",
			rec: func(r *task.Record) { r.PushedHash = task.Hash("partial") }, want: false},
		{name: "new content: a step (its plan paces it)", now: at(time.Second), text: "partial", want: true},
		{name: "a heartbeat due: a step", now: at(20 * time.Second), want: true},
		{name: "the window's margin reached: a step to close it", now: at(5*time.Minute + 30*time.Second), want: true},
		{name: "owed by push, still running: no step", now: at(time.Second),
			rec: func(r *task.Record) { r.Delivery = task.Truncated }, want: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := receipt()
			if tc.rec != nil {
				tc.rec(r)
			}
			s := seeing(r, tc.text)
			if tc.none {
				s.rec = nil
			}
			readAt := tc.readAt
			if readAt.IsZero() {
				readAt = tc.now
			}
			if got := ru.wants(s, readAt, tc.now); got != tc.want {
				t.Fatalf("wants = %v, want %v", got, tc.want)
			}
		})
	}
}

// shown applies a frame shown at now (hash "" for a heartbeat) to r, as
// the ledger records it (task.Rules.Shown).
func shown(t *testing.T, r *task.Record, hash string, now time.Time) {
	t.Helper()
	if err := (task.Rules{Node: "n1"}).Shown([]task.Frame{{Hash: hash, At: now}})(r); err != nil {
		t.Fatal(err)
	}
}

// TestUnchangedContentSendsNoFrame (moved here from the tests over real
// NATS, where it slept a second to see nothing sent): the same content
// written again and again after its frame sends nothing, until the
// heartbeat (an hour here) is due.
func TestUnchangedContentSendsNoFrame(t *testing.T) {
	ru := testRules()
	ru.Heartbeat = time.Hour
	clk := fakeclock.New(t0.Add(gap))
	r := receipt()
	mv := plan(ru, seeing(r, "partial"), clk.Now())
	if mv.act != actFrame || mv.content != "partial" {
		t.Fatalf("first version: %+v, want its frame", mv)
	}
	shown(t, r, mv.hash, clk.Now())
	for i := range 50 { // the same content, rewritten every 100 ms for 5 s
		clk.Step(100 * ms)
		s := seeing(r, "partial")
		s.version, s.watchedAt, s.shownAt = clk.Now(), clk.Now(), t0.Add(gap)
		if mv := plan(ru, s, clk.Now()); mv.act != actHold {
			t.Fatalf("rewrite %d of the same content: %+v", i, mv)
		}
		if ru.wants(s, clk.Now(), clk.Now()) {
			t.Fatalf("rewrite %d of the same content: the scan steps the task", i)
		}
	}
}

// The pacing TestQuotaNeverExceeded measured over real NATS, with a bound
// that had to allow for the machine's load: a worker writing ten times a
// second for a minute, the pusher stepping the task at each write, the
// conversation's budget (20 a minute) on the same fake clock. Progress
// goes at most once per progress gap, never into the final frame's
// reserve; the final frame always finds room; no minute holds more than
// the budget's 20 sends, the receipt and the final frame included.
func TestProgressIsPacedBelowTheBudget(t *testing.T) {
	ru := testRules()
	clk := fakeclock.New(t0)
	budget := pace.New(20, time.Minute, clk.Now)
	budget.Record("alice") // the receipt
	sends := []time.Time{t0}
	r := receipt()
	var frames []time.Time // progress frames
	text := ""
	for range 600 { // a version every 100 ms for a minute
		clk.Step(100 * ms)
		text += "x"
		s := seeing(r, text)
		s.version, s.watchedAt, s.room = clk.Now(), clk.Now(), budget.Remaining("alice")
		mv := plan(ru, s, clk.Now())
		if mv.act == actFlush {
			t.Fatalf("a version just written judged stale: %+v", mv)
		}
		if mv.act != actFrame {
			continue
		}
		if _, ok := budget.Spend("alice", finalReserve); !ok {
			continue // the step waits for a slot
		}
		shown(t, r, mv.hash, clk.Now())
		frames, sends = append(frames, clk.Now()), append(sends, clk.Now())
	}
	last := t0
	for _, f := range frames {
		if f.Sub(last) < gap {
			t.Fatalf("progress frames %s apart, the gap is %s", f.Sub(last), gap)
		}
		last = f
	}
	if n, most := len(frames), int(time.Minute/gap); n > most || n < most-1 {
		t.Fatalf("%d progress frames in a minute at a %s gap, want %d or %d", n, gap, most-1, most)
	}
	r.Exec, r.AnswerHash = task.Succeeded, task.Hash(text+" done")
	clk.Step(ms)
	if mv := plan(ru, seeing(r, text+" done"), clk.Now()); mv.act != actFinal {
		t.Fatalf("the answer complete: %+v, want the final frame", mv)
	}
	if _, ok := budget.Spend("alice", 0); !ok {
		t.Fatal("the final frame found no room")
	}
	sends = append(sends, clk.Now())
	for i, s := range sends {
		n := 0
		for _, o := range sends[i:] {
			if o.Sub(s) < time.Minute {
				n++
			}
		}
		if n > 20 {
			t.Fatalf("%d sends in the minute from %s", n, s.Sub(t0))
		}
	}
}

// TestNewLeaderAssumesTheUnwrittenFramesSent (moved here from the tests
// over real NATS, which started a rig to ask it): a new leader counts as
// sent the frames a previous one may have shown without writing them:
// one per progress gap, for shownWriteEvery after the record's last
// frame, none in the future.
func TestNewLeaderAssumesTheUnwrittenFramesSent(t *testing.T) {
	now := at(time.Hour)
	rec := &task.Record{Delivery: task.Streaming, PushedAt: now.Add(-5 * time.Second), RecentSends: []time.Time{now.Add(-5 * time.Second)}}
	got := assumedSends(rec, gap, now)
	if want := 1 + int(5*time.Second/gap); len(got) != want {
		t.Fatalf("5 s after the last written frame: %d sends assumed, want %d (%v)", len(got), want, got)
	}
	for i, s := range got[1:] {
		if want := rec.PushedAt.Add(time.Duration(i+1) * gap); !s.Equal(want) {
			t.Fatalf("assumed send %d at %s, want %s", i+1, s.Sub(rec.PushedAt), want.Sub(rec.PushedAt))
		}
	}
	rec.PushedAt, rec.RecentSends = now.Add(-50*time.Second), []time.Time{now.Add(-50 * time.Second)}
	if got, want := len(assumedSends(rec, gap, now)), 1+int(shownWriteEvery/gap); got != want {
		t.Fatalf("50 s after: %d sends assumed, want %d", got, want)
	}
	rec.Delivery = task.Truncated
	if got := assumedSends(rec, gap, now); len(got) != 1 {
		t.Fatalf("a pushed answer: %d sends assumed, want the recorded one", len(got))
	}
}

// How long the scan sleeps: until the earliest step's wait ends
// (TestHeldFrameGoesWhenItsWaitEnds: a held frame goes when its wait
// ends, with no tick to find it), but not less than minScanGap nor more
// than the tick's period.
func TestSleepFor(t *testing.T) {
	scan := time.Second
	cases := []struct {
		name string
		next time.Time
		ok   bool
		want time.Duration
	}{
		{name: "no wait: until the tick", want: scan},
		{name: "a wait ending before the tick: until it", next: at(300 * ms), ok: true, want: 300 * ms},
		{name: "a wait ending after the tick: until the tick", next: at(time.Hour), ok: true, want: scan},
		{name: "a wait ending in a moment: minScanGap, shared with others ending then", next: at(ms), ok: true, want: minScanGap},
		{name: "a wait ended already: minScanGap", next: at(-time.Second), ok: true, want: minScanGap},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := sleepFor(t0, tc.next, tc.ok, scan); got != tc.want {
				t.Fatalf("sleepFor = %s, want %s", got, tc.want)
			}
		})
	}
}

// A send that failed on the task waits a second, doubling per attempt,
// up to a minute.
func TestRetryIn(t *testing.T) {
	for attempts, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, time.Minute, time.Minute, time.Minute} {
		if got := retryIn(attempts); got != want {
			t.Errorf("retryIn(%d) = %s, want %s", attempts, got, want)
		}
	}
}
