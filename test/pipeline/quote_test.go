package pipeline

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// echoBackend makes the node's backend `cat` with input json: the answer
// the user reads is the ai.Request the backend received, byte for byte.
func echoBackend(cfg *config.Config) {
	cfg.AI.Kind = config.AIKindExec
	cfg.AI.Exec = config.AIExec{Command: []string{"cat"}, Input: config.ExecInputJSON}
}

// received is the request the echo backend was asked with, read from the
// answer to msgid in chat.
func (c *cluster) received(chat, msgid string) ai.Request {
	c.t.Helper()
	answer := c.replyTo(chat, msgid)
	var req ai.Request
	if err := json.Unmarshal([]byte(answer), &req); err != nil {
		c.t.Fatalf("the answer to %s is not the backend's input: %q (%v)", msgid, answer, err)
	}
	return req
}

// A quoted message's text is put before the question as a markdown
// quote, so the model sees what the user asks about: a quoted text, a
// voice message's transcription, a mixed message's text parts (its image
// a quoted file); a long quote is cut at 1,000 bytes with "…"; and the
// quote counts in access.max_question_bytes. Through the real path:
// simulator → leader → queue → worker → the backend's input.
func TestQuotedTextIsPutBeforeTheQuestion(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	n := c.start("n1", func(cfg *config.Config) {
		echoBackend(cfg)
		cfg.Access.MaxQuestionBytes = 2000
	})
	testwait.Eventually(t, waitLong, "leader connected", c.connected)

	long := strings.Repeat("长", 500) // 1,500 bytes: cut to 333 runes (999 bytes)
	for _, tc := range []struct {
		name, user string
		quote      *wecomsim.QuotePart
		question   string
		want       string // the last user message the backend gets
		files      int    // quoted files the backend gets
	}{
		{"text", "qa", &wecomsim.QuotePart{MsgType: "text", Text: "the deploy failed at step 3\nerror: disk full"},
			"what does this mean?", "> the deploy failed at step 3\n> error: disk full\n\nwhat does this mean?", 0},
		{"voice", "qb", &wecomsim.QuotePart{MsgType: "voice", Text: "remind me about the meeting"},
			"when is it?", "> remind me about the meeting\n\nwhen is it?", 0},
		{"mixed", "qc", &wecomsim.QuotePart{MsgType: "mixed", Items: []wecomsim.MixedPart{
			{MsgType: "text", Text: "this chart"}, {MsgType: "image"}, {MsgType: "text", Text: "from Monday"}}},
			"is it rising?", "> this chart\n> from Monday\n\nis it rising?", 1},
		{"long", "qd", &wecomsim.QuotePart{MsgType: "text", Text: long},
			"summarise", "> " + strings.Repeat("长", 333) + "…\n\nsummarise", 0},
	} {
		sent := c.postAs(wecomsim.MessageRequest{UserID: tc.user, Text: tc.question, Quote: tc.quote})
		req := c.received(tc.user, sent.MsgID)
		if len(req.Messages) == 0 {
			t.Fatalf("%s: the backend got no messages: %+v", tc.name, req)
		}
		last := req.Messages[len(req.Messages)-1]
		if last.Role != ai.RoleUser || last.Content != tc.want {
			t.Errorf("%s: the backend's question is %s %q, want user %q", tc.name, last.Role, last.Content, tc.want)
		}
		quoted := 0
		for _, a := range req.Attachments {
			if a.Quoted {
				quoted++
			}
		}
		if quoted != tc.files || len(req.Attachments) != tc.files {
			t.Errorf("%s: attachments %+v, want %d quoted", tc.name, req.Attachments, tc.files)
		}
		if r := c.record(n, sent.MsgID); r.Question != tc.want {
			t.Errorf("%s: the task's question %q, want %q", tc.name, r.Question, tc.want)
		}
	}

	// The quote counts in max_question_bytes: a short question quoting
	// a long text is too long, and no task is made.
	over := c.postAs(wecomsim.MessageRequest{UserID: "qe", Text: strings.Repeat("问", 400), // 1,200 bytes
		Quote: &wecomsim.QuotePart{MsgType: "text", Text: long}})
	if got := c.replyTo("qe", over.MsgID); !strings.Contains(got, "2000 字节以内") {
		t.Fatalf("a question over the limit with its quote: %q", got)
	}
	if r := c.record(n, over.MsgID); r.ID != "" {
		t.Fatalf("a task was made for it: %+v", r)
	}
}
