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

// The re-probe path, judged from recorded traffic alone: a probe refused
// as busy while its conversation still owed an earlier answer, probed
// again (Msg.Reprobed) once that answer was in, is judged by the second
// probe. Answered, the conversation is not locked; refused again, or
// never probed again, it is.
func TestJudgeReprobe(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	const busy = "上一个问题还在处理中，请稍候再问。"
	trs := map[string][]cluster.TranscriptEntry{}
	var msgs []*Msg
	// say records what happened in user's conversation, in order: a user
	// message, and what the bot answered it (its complete answer, a busy
	// refusal, nothing).
	say := func(user string, m *Msg, answer string) *Msg {
		tr := trs[user]
		m.User, m.Delivered, m.PostedAt = user, true, t0.Add(time.Duration(len(tr))*time.Second)
		m.MsgID = fmt.Sprintf("%s-m%d", user, len(tr))
		tr = append(tr, cluster.TranscriptEntry{Seq: int64(len(tr) + 1), From: "user", MsgID: m.MsgID, Content: m.Question, Finished: true})
		switch answer {
		case "answer":
			answer = ai.DemoAnswer(m.Question, 3, 0)
		case "busy":
			answer = busy
		}
		if answer != "" {
			tr = append(tr, cluster.TranscriptEntry{Seq: int64(len(tr) + 1), From: "bot", ReplyTo: m.MsgID, Kind: "stream", Content: answer, Finished: true})
		}
		trs[user] = tr
		msgs = append(msgs, m)
		return m
	}
	q := func(user string, n int) *Msg { return &Msg{Question: fmt.Sprintf("chaos r1 %s q #%d", user, n)} }
	probe := func(user string, n int, reprobed bool) *Msg {
		return &Msg{Question: fmt.Sprintf("chaos r1 %s probe #%d.0", user, n), Probe: true, Reprobed: reprobed}
	}
	// late appends the complete answer to an earlier message of user's
	// (the backfill's, after the first probe was refused).
	late := func(user string, m *Msg) {
		tr := trs[user]
		trs[user] = append(tr, cluster.TranscriptEntry{Seq: int64(len(tr) + 1), From: "bot", ReplyTo: m.MsgID, Kind: "stream",
			Content: ai.DemoAnswer(m.Question, 3, 0), Finished: true})
	}
	// ok: the first probe is refused while the first question is still
	// owed; its answer comes; the second probe is answered.
	owed := say("ok", q("ok", 1), "")
	okFirst := say("ok", probe("ok", 2, true), "busy")
	late("ok", owed)
	say("ok", probe("ok", 3, false), "answer")
	// again: the same, but the second probe is refused too.
	owed = say("again", q("again", 1), "")
	say("again", probe("again", 2, true), "busy")
	late("again", owed)
	againSecond := say("again", probe("again", 3, false), "busy")
	// once: refused, never probed again.
	say("once", q("once", 1), "answer")
	onceFirst := say("once", probe("once", 2, false), "busy")

	j := judgeTranscripts(trs, msgs, msgs, nil)
	locked := map[string]string{} // msgid → invariant
	for _, v := range j.violations {
		locked[v.MsgID] = v.Invariant
	}
	if inv, ok := locked[okFirst.MsgID]; ok {
		t.Errorf("a refused probe re-probed and answered is reported %q: %+v", inv, j.violations)
	}
	for _, m := range []*Msg{againSecond, onceFirst} {
		if locked[m.MsgID] != InvLocked {
			t.Errorf("%s (%q): %q, want %q: %+v", m.MsgID, m.Question, locked[m.MsgID], InvLocked, j.violations)
		}
	}
	if len(j.violations) != 2 {
		t.Errorf("%d violations, want 2 (the second refused re-probe, the refused probe never probed again): %+v", len(j.violations), j.violations)
	}
}

// A group message is judged in its group's transcript, where every
// member's answers are: answered once there is an answer, lost when the
// group has none for it (however its asker's single chat looks).
func TestJudgeGroupMessages(t *testing.T) {
	m := &Msg{User: "u1", Chat: "chaos-group", MsgID: "g1", Question: "chaos x u1 in chaos-group q #1", Delivered: true}
	lost := &Msg{User: "u2", Chat: "chaos-group", MsgID: "g2", Question: "chaos x u2 in chaos-group q #1", Delivered: true}
	group := []cluster.TranscriptEntry{
		{Seq: 1, From: "user", MsgID: "g1", Content: m.Question, Finished: true},
		{Seq: 2, From: "user", MsgID: "g2", Content: lost.Question, Finished: true},
		{Seq: 3, From: "bot", ReplyTo: "g1", Kind: "stream", Content: ai.DemoAnswer(m.Question, 3, 0), Finished: true},
	}
	// u2's single chat has the answer the group lacks: not where it is owed.
	single := []cluster.TranscriptEntry{{Seq: 1, From: "bot", Kind: "markdown", Content: ai.DemoAnswer(lost.Question, 3, 0), Finished: true}}
	trs := map[string][]cluster.TranscriptEntry{"chaos-group": group, "u1": nil, "u2": single}
	j := judgeTranscripts(trs, []*Msg{m, lost}, []*Msg{m, lost}, nil)
	if j.answered != 1 || len(j.violations) != 1 || j.violations[0].MsgID != "g2" || j.violations[0].User != "chaos-group" {
		t.Fatalf("answered %d, violations %+v; want g1 answered and g2 lost in chaos-group", j.answered, j.violations)
	}
}

// A removed bot's lost message is excused only when its removal listed
// it as owed, and one never delivered is owed nothing; a bot still served
// is excused nothing, and a duplicate never.
func TestSideBotViolations(t *testing.T) {
	vs := []Violation{
		{Invariant: InvLost, User: "u1", MsgID: "listed"},
		{Invariant: InvLost, User: "u1", MsgID: "unlisted"},
		{Invariant: InvMissed, User: "u1", MsgID: "undelivered"},
		{Invariant: InvDuplicate, User: "u1", MsgID: "twice"},
	}
	served := &sideBot{bot: "mb1", listed: map[string]bool{"listed": true}}
	kept, listed, unowed := served.violations(vs)
	if len(kept) != 4 || listed != 0 || unowed != 0 || kept[0].User != "mb1/u1" {
		t.Fatalf("served bot: kept %v, listed %d, unowed %d; want all 4 kept, named mb1/u1", kept, listed, unowed)
	}
	removed := &sideBot{bot: "mb1", removed: true, listed: map[string]bool{"listed": true}}
	kept, listed, unowed = removed.violations(vs)
	if len(kept) != 2 || kept[0].MsgID != "unlisted" || kept[1].MsgID != "twice" || listed != 1 || unowed != 1 {
		t.Fatalf("removed bot: kept %v, listed %d, unowed %d; want the unlisted loss and the duplicate kept, 1 listed, 1 unowed", kept, listed, unowed)
	}
}
