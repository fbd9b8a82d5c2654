package worker_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/task"
)

// A primary backend refusing connections (its port closed) falls back to
// the next for the same attempt: the task succeeds with the fallback's
// answer, and its record names the backend that answered and the one
// that failed, with why.
func TestFallbackShownInTheRecord(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{TaskMaxDeliver: 3})
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	b, err := ai.New(ai.Config{Kind: ai.KindHTTP, HTTP: ai.HTTPConfig{URL: deadURL + "/answer"},
		Fallback: []ai.BackendConfig{{Kind: ai.KindDemo, Demo: ai.DemoConfig{AnswerTime: 200 * time.Millisecond}}}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, env.Store, "w1", b)
	m := publish(t, env.Store, "m1", "alice", "what is botctl?")
	testwait.Eventually(t, waitLong, "record succeeded", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
	r := record(t, env.Store, m.TaskID)
	primary := "http:" + strings.TrimPrefix(deadURL, "http://")
	if r.Attempt != 1 || r.AnsweredBy != "demo" || len(r.Backends) != 2 {
		t.Fatalf("record: attempt %d, answered by %q, backends %+v", r.Attempt, r.AnsweredBy, r.Backends)
	}
	if s := r.Backends[0]; s.Attempt != 1 || s.Backend != primary || s.Outcome != "failed" || !strings.Contains(s.Reason, "refused") {
		t.Errorf("first step %+v, want %s failed: connection refused", s, primary)
	}
	if s := r.Backends[1]; s != (task.BackendStep{Attempt: 1, Backend: "demo", Outcome: "answered"}) {
		t.Errorf("second step %+v", s)
	}
	if o := answer(env.Store, m.TaskID); !strings.HasPrefix(o.Text, "You asked: what is botctl?") {
		t.Errorf("output %q", o.Text)
	}
}

// A backend killed mid-stream ends the answer with the note, never a
// silent cut: the task fails at once (no retry: the user read part of
// it), the output keeps the text and the note, the record says cut.
func TestCutAnswerEndsWithTheNote(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{TaskMaxDeliver: 3})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"text\": \"half of \"}\n\ndata: {\"text\": \"an answer\"}\n\n")
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	b, err := ai.New(ai.Config{Kind: ai.KindHTTP, HTTP: ai.HTTPConfig{URL: srv.URL + "/answer"},
		Fallback: []ai.BackendConfig{{Kind: ai.KindDemo}}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, env.Store, "w1", b)
	m := publish(t, env.Store, "m1", "alice", "q")
	testwait.Eventually(t, waitLong, "record failed", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Failed })
	r := record(t, env.Store, m.TaskID)
	name := "http:" + strings.TrimPrefix(srv.URL, "http://")
	if r.Attempt != 1 || !strings.Contains(r.Error, "answer cut") || r.AnsweredBy != name || len(r.Backends) != 1 || r.Backends[0].Outcome != "cut" {
		t.Fatalf("record: attempt %d, error %q, answered by %q, backends %+v", r.Attempt, r.Error, r.AnsweredBy, r.Backends)
	}
	want := "half of an answer\n\n" + fmt.Sprintf(ai.CutNote, name)
	testwait.Eventually(t, waitLong, "output with the note", func() bool { return answer(env.Store, m.TaskID).Text == want })
	testwait.Eventually(t, waitLong, "conversation free", func() bool { return free(t, env.Store, "alice", "m2") })
}
