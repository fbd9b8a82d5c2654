package main

import (
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/test/e2e/cluster"
)

// The judge must see what a user sees: these transcripts are built by
// hand, so the verdicts do not depend on botctl behaving.
func TestJudge(t *testing.T) {
	m := &Msg{User: "u", MsgID: "m1", Question: "chaos x u q #1", Delivered: true}
	full := ai.DemoAnswer(m.Question, 3, 0)
	user := cluster.TranscriptEntry{Seq: 1, From: "user", MsgID: "m1", Content: m.Question, Finished: true}
	stream := func(content string, finished bool) cluster.TranscriptEntry {
		return cluster.TranscriptEntry{Seq: 2, From: "bot", ReplyTo: "m1", Kind: "stream", Content: content, Finished: finished}
	}
	push := cluster.TranscriptEntry{Seq: 3, From: "bot", Kind: "markdown", Content: full, Finished: true}
	other := cluster.TranscriptEntry{Seq: 4, From: "bot", Kind: "markdown", Content: ai.DemoAnswer("chaos x u q #10", 3, 0), Finished: true}
	for _, c := range []struct {
		name           string
		tr             []cluster.TranscriptEntry
		complete, busy int
	}{
		{"nothing", []cluster.TranscriptEntry{user}, 0, 0},
		{"receipt only", []cluster.TranscriptEntry{user, stream("已收到，正在处理…", false)}, 0, 0},
		{"stream open with the whole text", []cluster.TranscriptEntry{user, stream(full, false)}, 0, 0},
		{"stream finished", []cluster.TranscriptEntry{user, stream(full, true)}, 1, 0},
		{"stream cut short then pushed", []cluster.TranscriptEntry{user, stream(full[:40]+"（回答较长）", true), push}, 1, 0},
		{"stream and push: twice", []cluster.TranscriptEntry{user, stream(full, true), push}, 2, 0},
		{"another question's push", []cluster.TranscriptEntry{user, other}, 0, 0},
		{"busy", []cluster.TranscriptEntry{user, stream("上一个问题还在处理中，请稍候再问。", true)}, 0, 1},
		{"late busy reply pushed, quoting the question", []cluster.TranscriptEntry{user,
			{Seq: 3, From: "bot", Kind: "markdown", Content: "> chaos x u q #1\n\n上一个问题还在处理中，请稍候再问。", Finished: true}}, 0, 1},
		{"a pushed busy reply quoting another question", []cluster.TranscriptEntry{user,
			{Seq: 3, From: "bot", Kind: "markdown", Content: "> chaos x u q #10\n\n上一个问题还在处理中，请稍候再问。", Finished: true}}, 0, 0},
		{"a busy reply pushed without a quote", []cluster.TranscriptEntry{user,
			{Seq: 3, From: "bot", Kind: "markdown", Content: "上一个问题还在处理中，请稍候再问。", Finished: true}}, 0, 0},
	} {
		v := Judge(c.tr, m)
		if v.Complete != c.complete || v.Busy != c.busy {
			t.Errorf("%s: complete %d busy %d, want %d and %d (saw %s)", c.name, v.Complete, v.Busy, c.complete, c.busy, v.Saw())
		}
	}
}

// A missed message is accepted when a later bot message of its
// conversation carries the "may be incomplete" note; a note before it, or
// none, is not a mark. A failure notice is counted apart from answers.
func TestJudgeMarksAndFailures(t *testing.T) {
	m := &Msg{User: "u", MsgID: "m2", Question: "chaos x u q #2"}
	note := "（提示：系统故障期间你发送的部分消息可能未被处理；如有问题没有得到回答，请重新发送。）"
	later := &Msg{User: "u", MsgID: "m3", Question: "chaos x u q #3", Delivered: true}
	markedAnswer := cluster.TranscriptEntry{Seq: 5, From: "bot", ReplyTo: "m3", Kind: "stream", Finished: true,
		Content: note + "\n" + ai.DemoAnswer(later.Question, 3, 0)}
	earlyNote := cluster.TranscriptEntry{Seq: 1, From: "bot", Kind: "markdown", Finished: true, Content: note}
	asked := cluster.TranscriptEntry{Seq: 2, From: "user", MsgID: "m2", Content: m.Question}
	askedLater := cluster.TranscriptEntry{Seq: 4, From: "user", MsgID: "m3", Content: later.Question}
	if v := Judge([]cluster.TranscriptEntry{asked, askedLater, markedAnswer}, m); !v.Marked || v.Answers() != 0 {
		t.Errorf("note after the message: marked %v answers %d, want true and 0", v.Marked, v.Answers())
	}
	if v := Judge([]cluster.TranscriptEntry{earlyNote, asked}, m); v.Marked {
		t.Errorf("a note before the message marked it")
	}
	if v := Judge([]cluster.TranscriptEntry{asked}, m); v.Marked {
		t.Errorf("no note, marked")
	}
	// The later message's own answer is complete despite the note.
	if v := Judge([]cluster.TranscriptEntry{asked, askedLater, markedAnswer}, later); v.Complete != 1 {
		t.Errorf("answer with the incomplete note: complete %d, want 1", v.Complete)
	}
	failed := cluster.TranscriptEntry{Seq: 3, From: "bot", ReplyTo: "m2", Kind: "stream", Finished: true, Content: "已收到\n抱歉，这个问题处理失败了，请稍后重试。"}
	if v := Judge([]cluster.TranscriptEntry{asked, failed}, m); v.Failed != 1 || v.Answers() != 0 {
		t.Errorf("failure notice: failed %d answers %d, want 1 and 0", v.Failed, v.Answers())
	}
}

// The takeover plot is a PNG with every scenario that had a takeover;
// without one, no file.
func TestTakeoverPlot(t *testing.T) {
	dir := t.TempDir()
	none := filepath.Join(dir, "none.png")
	if err := takeoverPlot(none, []*RoundResult{{Scenario: "sim-silence"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(none); !os.IsNotExist(err) {
		t.Fatalf("a plot without takeovers: %v", err)
	}
	path := filepath.Join(dir, "takeover.png")
	rounds := []*RoundResult{
		{Scenario: "kill-leader", Takeovers: []Takeover{{D: 2200 * time.Millisecond}}},
		{Scenario: "kill-leader", Takeovers: []Takeover{{D: 3 * time.Second}}},
		{Scenario: "term-leader", Takeovers: []Takeover{{D: 27 * time.Millisecond}, {Err: "none within 60s"}}},
	}
	if err := takeoverPlot(path, rounds); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 300 {
		t.Fatalf("plot of %v", b)
	}
}

// A probe's question is one with a quick answer (within the shortest
// tenth of the range); the traffic's questions keep the whole range.
func TestProbesAskQuickQuestions(t *testing.T) {
	tr := &Traffic{demo: ai.DemoConfig{AnswerTime: 5 * time.Second, AnswerTimeMax: time.Minute}}
	for i := range 50 {
		q := tr.shortQuestion(fmt.Sprintf("chaos r1 u%d probe #1", i))
		if d := ai.DemoAnswerTime(tr.demo, q); d > 10500*time.Millisecond {
			t.Fatalf("probe %q answers in %s, want at most 10.5s", q, d)
		}
	}
	fixed := &Traffic{demo: ai.DemoConfig{AnswerTime: 5 * time.Second}}
	if q := fixed.shortQuestion("q"); ai.DemoAnswerTime(fixed.demo, q) != 5*time.Second {
		t.Fatalf("fixed answer time: %q", q)
	}
}
