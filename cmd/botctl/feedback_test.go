package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

// `botctl feedback` summarises each task's latest verdict per bot (text
// and --json), and `botctl tasks show` prints a task's.
func TestFeedbackSummaryAndTaskShow(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	url := env.Server.ClientURL()
	ctx := context.Background()
	lc := task.NewLifecycle(env.Store, "leader", zerolog.Nop())
	at := time.Date(2026, 12, 4, 5, 0, 0, 0, time.UTC)
	var first string
	for i, v := range []struct {
		bot, msgid string
		fb         *task.Feedback
	}{
		{"b", "m1", &task.Feedback{Kind: "inaccurate", Content: "too short", Reasons: []int{2, 3}, User: "alice", At: at}},
		{"b", "m2", &task.Feedback{Kind: "inaccurate", Reasons: []int{2}, User: "bob", At: at}},
		{"b", "m3", &task.Feedback{Kind: "accurate", User: "carol", At: at}},
		{"b", "m4", nil},
		{"c", "m5", &task.Feedback{Kind: "canceled", User: "dave", At: at}},
	} {
		r := task.New(v.bot, v.msgid, at)
		r.Chat, r.ChatType, r.User, r.Question = "u", "single", "u", "q"
		if _, err := lc.Open(ctx, r); err != nil {
			t.Fatal(err)
		}
		if v.fb != nil {
			if _, err := lc.Feedback(ctx, v.bot, r.ID, "ev-"+v.msgid, *v.fb); err != nil {
				t.Fatal(err)
			}
		}
		if i == 0 {
			first = r.ID
		}
	}
	if _, err := lc.Feedback(ctx, "c", first, "ev-x", task.Feedback{Kind: "accurate"}); err == nil {
		t.Fatal("feedback of another bot's task recorded")
	}

	out, err := run(t, "feedback", "--nats", url, "--json")
	if err != nil {
		t.Fatalf("feedback --json: %v\n%s", err, out)
	}
	var got struct {
		Bots []feedbackSummary `json:"bots"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(got.Bots) != 2 {
		t.Fatalf("bots %+v", got.Bots)
	}
	b, c := got.Bots[0], got.Bots[1]
	if b.Bot != "b" || b.Tasks != 3 || b.Inaccurate != 2 || b.Accurate != 1 || b.Reasons["2"] != 2 || b.Reasons["3"] != 1 ||
		c.Bot != "c" || c.Tasks != 1 || c.Canceled != 1 {
		t.Fatalf("summary %+v", got.Bots)
	}
	out, err = run(t, "feedback", "--nats", url, "--bot", "c")
	if err != nil || !strings.Contains(out, "BOT") || strings.Contains(out, "\nb ") || !strings.Contains(out, "c ") {
		t.Fatalf("feedback --bot c: %v\n%s", err, out)
	}
	out, err = run(t, "tasks", "show", first, "--nats", url)
	if err != nil || !strings.Contains(out, "feedback  inaccurate by alice") || !strings.Contains(out, "reasons [2 3]") || !strings.Contains(out, "too short") {
		t.Fatalf("tasks show: %v\n%s", err, out)
	}
	out, err = run(t, "tasks", "show", first, "--nats", url, "--json")
	if err != nil || !strings.Contains(out, `"feedback"`) {
		t.Fatalf("tasks show --json: %v\n%s", err, out)
	}
}
