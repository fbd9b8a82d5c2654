package main

import (
	"testing"

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
	} {
		v := Judge(c.tr, m)
		if v.Complete != c.complete || v.Busy != c.busy {
			t.Errorf("%s: complete %d busy %d, want %d and %d (saw %s)", c.name, v.Complete, v.Busy, c.complete, c.busy, v.Saw())
		}
	}
}
