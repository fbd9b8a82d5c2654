package health_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

// Every AI backend of a bot down opens one AI incident (a person must
// look), whoever else reports it; a backend answering again closes it.
func TestAIDownOpensAnIncidentClosedWhenABackendAnswers(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	h := health.New(health.Config{NodeID: "n1", Logger: zerolog.Nop()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	h.Bind(env.Store, task.NewLifecycle(env.Store, "n1", zerolog.Nop()))
	incs := incident.NewStore(env.Store.Incidents())
	open := func() *incident.Incident {
		inc, err := incs.OpenFor(context.Background(), "b1", incident.AI)
		if err != nil {
			t.Fatal(err)
		}
		return inc
	}

	h.AIDown("b1", map[string]string{"openai:gpt-4o": "ai: backend failed: HTTP 503 overloaded", "demo": "ai: answer timed out"})
	testwait.Eventually(t, 30*time.Second, "AI incident open", func() bool { return open() != nil })
	inc := open()
	if inc.Level != incident.Human || inc.Signal != incident.SignalAIDown || !strings.Contains(inc.Reason, "openai:gpt-4o: ai: backend failed: HTTP 503") ||
		!strings.Contains(inc.Reason, "demo: ai: answer timed out") || !strings.HasSuffix(inc.ID, "-ai") {
		t.Fatalf("incident %+v", inc)
	}
	h.AIDown("b1", map[string]string{"demo": "again"}) // another report: the same incident
	h.Settle(context.Background(), "b1")
	all, err := incs.List(context.Background(), incident.Filter{Bot: "b1"})
	if err != nil || len(all) != 1 || len(all[0].Events) < 2 {
		t.Fatalf("incidents %+v, %v: want the one, noted again", all, err)
	}

	h.AIUp("b1", "demo")
	testwait.Eventually(t, 30*time.Second, "AI incident closed", func() bool { return open() == nil })
	closed, err := incs.Get(context.Background(), "b1", inc.ID)
	if err != nil || closed.State != incident.Closed || closed.Recovered.IsZero() || !strings.Contains(closed.Events[len(closed.Events)-1].What, "demo answered again") {
		t.Fatalf("closed incident %+v, %v", closed, err)
	}
}
