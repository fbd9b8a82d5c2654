package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/worker"
	"github.com/rs/zerolog"
)

// stepped emits each delta it is handed, and ends when deltas closes.
type stepped struct {
	entered chan struct{}
	deltas  chan string
}

func (s *stepped) Name() string { return "stepped" }
func (s *stepped) Stream(ctx context.Context, _ ai.Request, emit func(string) error) error {
	close(s.entered)
	for {
		select {
		case d, ok := <-s.deltas:
			if !ok {
				return nil
			}
			if err := emit(d); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// The pusher's flush request (botctl.flush.<node>, payload the task id)
// makes the running attempt write its text to the progress bucket now,
// not at its output interval (an hour here: nothing else writes it); a
// request for a task not running on the node, or for another node, is
// ignored. Fails without the worker's flush subscription (checked: the
// text never reaches the progress bucket).
func TestFlushRequestWritesTheTextNow(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	b := &stepped{entered: make(chan struct{}), deltas: make(chan string)}
	w, err := worker.New(worker.Config{NodeID: "w 1", Backend: b, Store: env.Store, Slots: 2,
		OutputInterval: time.Hour, RetryDelay: 100 * time.Millisecond, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	m := publish(t, env.Store, "m1", "alice", "q")
	select {
	case <-b.entered:
	case <-time.After(waitLong):
		t.Fatal("the backend was never called")
	}
	n := env.Store.Names()
	subject := n.FlushSubjectPrefix + "." + jetstream.EncodeToken("w 1")
	conn := env.Store.JetStream().Conn()
	progress := func() string {
		o, err := task.ReadOutput(context.Background(), env.Store, m.TaskID, false)
		if err != nil || o == nil {
			return ""
		}
		return o.Text
	}
	for _, text := range []string{"Hello", "Hello, alice."} {
		b.deltas <- text[len(progress()):]
		// Harmless: an unknown task, and this task on another node.
		for _, req := range []struct{ subject, id string }{
			{subject, "no-such-task"},
			{n.FlushSubjectPrefix + "." + jetstream.EncodeToken("w2"), m.TaskID},
		} {
			if err := conn.Publish(req.subject, []byte(req.id)); err != nil {
				t.Fatal(err)
			}
		}
		// Asked again each poll: a request is core NATS, and the check
		// is that the text comes, not that one request brings it.
		testwait.Eventually(t, waitLong, "the text in the progress bucket after a flush request", func() bool {
			if err := conn.Publish(subject, []byte(m.TaskID)); err != nil {
				t.Fatal(err)
			}
			return progress() == text
		})
	}
	close(b.deltas)
	testwait.Eventually(t, waitLong, "task succeeded", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
	if o := answer(env.Store, m.TaskID); o.Text != "Hello, alice." {
		t.Fatalf("answer %q", o.Text)
	}
}
