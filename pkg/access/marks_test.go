package access

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/dispatch"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

type noDispatch struct{}

func (noDispatch) DispatchUnless(context.Context, task.Message, func() bool) (dispatch.Outcome, error) {
	return dispatch.Outcome{}, nil
}

// A seen mark JetStream refuses (its server down) is kept and written
// once JetStream answers again, so that the next leader's gap backfill
// does not answer its message a second time.
func TestSeenMarkRefusedIsWrittenOnceJetStreamAnswers(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	a, err := New(Config{NodeID: "n1", Dispatch: noDispatch{}, Timeout: 300 * time.Millisecond, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	a.Bind(env.Store, nil)
	js := a.js.Load()
	u, err := url.Parse(env.Server.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	env.Server.Close()

	a.markSeen(context.Background(), js, "b1", "m-while-down", time.Now())
	a.marks.mu.Lock()
	waiting := len(a.marks.waiting)
	a.marks.mu.Unlock()
	if waiting != 1 {
		t.Fatalf("%d marks kept while JetStream is down, want 1", waiting)
	}

	host, port, _ := net.SplitHostPort(u.Host)
	srv, err := infra.StartNATS(infra.NATSConfig{DataDir: env.DataDir, Addr: net.JoinHostPort(host, port), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	testwait.Eventually(t, time.Minute, "the kept mark written", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		seen, err := env.Store.Seen(ctx, "b1", "m-while-down")
		return err == nil && seen
	})
	a.Wait()
	a.marks.mu.Lock()
	defer a.marks.mu.Unlock()
	if a.marks.running || len(a.marks.waiting) != 0 {
		t.Errorf("writer running %v with %d marks after Wait", a.marks.running, len(a.marks.waiting))
	}
}
