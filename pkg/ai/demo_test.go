package ai

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func newDemoForTest(t *testing.T, cfg DemoConfig) Backend {
	t.Helper()
	b, err := newUnchained(Config{Kind: KindDemo, Demo: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDemoAnswer(t *testing.T) {
	leakCheck(t)
	const answerTime = 200 * time.Millisecond
	b := newDemoForTest(t, DemoConfig{AnswerTime: answerTime})
	if b.Name() != "demo" {
		t.Errorf("Name() = %q", b.Name())
	}
	req := Request{TaskID: "t1", Messages: []Message{
		{Role: RoleUser, Content: "earlier question"},
		{Role: RoleAssistant, Content: "earlier answer"},
		{Role: RoleUser, Content: "怎么部署 botctl？"},
	}}
	rec := newRecorder()
	start := time.Now()
	if err := b.Stream(context.Background(), req, rec.emit); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took < answerTime-10*time.Millisecond {
		t.Errorf("answer took %s, want about %s", took, answerTime)
	}
	deltas := rec.all()
	checkDeltas(t, deltas)
	if len(deltas) < 3 {
		t.Errorf("%d deltas, want the answer in several pieces", len(deltas))
	}
	text := rec.text()
	if want := DemoAnswer("怎么部署 botctl？", 3, 0); text != want {
		t.Errorf("streamed text differs from DemoAnswer:\n%q\n%q", text, want)
	}
	if !strings.HasPrefix(text, "You asked: 怎么部署 botctl？\n") {
		t.Errorf("answer does not start with the question: %q", text)
	}
	for i := 1; i <= 3; i++ {
		if !strings.Contains(text, fmt.Sprintf("\n%d. ", i)) {
			t.Errorf("no paragraph %d in %q", i, text)
		}
	}
	if strings.Contains(text, "\n4. ") {
		t.Errorf("more than 3 paragraphs in %q", text)
	}
}

func TestDemoAnswerIsDeterministic(t *testing.T) {
	a, b := DemoAnswer("what is raft?", 4, 0), DemoAnswer("what is raft?", 4, 0)
	if a != b {
		t.Fatalf("same question, different answers:\n%s\n%s", a, b)
	}
	if c := DemoAnswer("what is paxos?", 4, 0); c == a {
		t.Errorf("different questions, same answer")
	}
}

func TestDemoLongAnswer(t *testing.T) {
	leakCheck(t)
	b := newDemoForTest(t, DemoConfig{AnswerTime: 300 * time.Millisecond, Paragraphs: 12, AnswerBytes: 30000})
	rec := newRecorder()
	if err := b.Stream(context.Background(), question("a long one, please"), rec.emit); err != nil {
		t.Fatal(err)
	}
	text := rec.text()
	checkDeltas(t, rec.all())
	if len(text) < 30000 || len(text) > 31000 {
		t.Errorf("answer is %d bytes, want at least 30000 (and not much more)", len(text))
	}
	if !strings.Contains(text, "\n12. ") || strings.Contains(text, "\n13. ") {
		t.Errorf("want exactly 12 paragraphs")
	}
	for _, n := range []int{1, 100, 20481, 100000} {
		if got := len(DemoAnswer("q", 3, n)); got < n {
			t.Errorf("DemoAnswer(answerBytes=%d) is %d bytes", n, got)
		}
	}
}

func TestDemoCancel(t *testing.T) {
	leakCheck(t)
	b := newDemoForTest(t, DemoConfig{AnswerTime: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := newRecorder()
	wait := streamAsync(t, ctx, b, question("slow"), rec)
	rec.waitFor(t, "You")
	cancel()
	took, err := wait()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Stream: %v, want context.Canceled", err)
	}
	if took > prompt {
		t.Errorf("Stream returned %s after cancel", took)
	}
}

func TestDemoEmitErrorStops(t *testing.T) {
	leakCheck(t)
	b := newDemoForTest(t, DemoConfig{AnswerTime: 200 * time.Millisecond})
	errFull := errors.New("storage full")
	rec := newRecorder()
	rec.fail = errFull
	err := b.Stream(context.Background(), question("q"), rec.emit)
	if err != errFull {
		t.Fatalf("Stream: %v, want emit's error unchanged", err)
	}
	if n := len(rec.all()); n != 1 {
		t.Errorf("%d emits after emit failed, want 1", n)
	}
}

// With AnswerTimeMax, answers spread over the range, each question always
// taking the same time (a rerun of a load or chaos run takes as long).
func TestDemoAnswerTimeSpread(t *testing.T) {
	b := &demoBackend{cfg: DemoConfig{AnswerTime: 5 * time.Second, AnswerTimeMax: 60 * time.Second}}
	lo, hi := time.Hour, time.Duration(0)
	for i := range 200 {
		q := fmt.Sprintf("question %d", i)
		d := b.answerTime(q)
		if d < 5*time.Second || d > 60*time.Second {
			t.Fatalf("%q takes %s, outside [5s, 60s]", q, d)
		}
		if again := b.answerTime(q); again != d {
			t.Fatalf("%q takes %s, then %s", q, d, again)
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	if hi-lo < 30*time.Second {
		t.Fatalf("200 questions spread over %s to %s only", lo, hi)
	}
	fixed := &demoBackend{cfg: DemoConfig{AnswerTime: 5 * time.Second}}
	if d := fixed.answerTime("q"); d != 5*time.Second {
		t.Fatalf("without a max: %s", d)
	}
	// The stream takes that long.
	short := newDemoForTest(t, DemoConfig{AnswerTime: 100 * time.Millisecond, AnswerTimeMax: 400 * time.Millisecond})
	start := time.Now()
	if err := short.Stream(context.Background(), Request{TaskID: "t", Messages: []Message{{Role: "user", Content: "q"}}}, func(string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Fatalf("streamed in %s, below answer_time", el)
	}
}
