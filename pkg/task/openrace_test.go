package task_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// On R3 the leader's Open and a worker's Start (which opens a record it
// cannot find) race to create the same record, from different servers.
// The loser's create may be refused while the winner's is still in flight
// (nats-server's "wrong last sequence" for a write in flight), when a read
// does not find the record yet: that read must be tried again, not fail
// the Open (the worker then nak'd the task and it waited 2 s for a second
// delivery: 19% of the tasks of a 200-conversation ramp step).
func TestOpenRacingCreateOnR3(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-server NATS cluster")
	}
	c := testenv.NewNATSCluster(t, 3)
	c.SyncAlways = true // botctl's servers' setting: a write is in flight for an fsync
	for i := range 3 {
		c.Start(t, i)
	}
	urls := c.URLs()
	stA, _ := testenv.DeclareOnCluster(t, urls[:1], jetstream.Options{Replicas: 3})
	stB, _ := testenv.DeclareOnCluster(t, urls[1:2], jetstream.Options{Replicas: 3})
	leader := task.NewLifecycle(stA, "n1", zerolog.Nop())
	worker := task.NewLifecycle(stB, "n2", zerolog.Nop())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	failed := 0
	// Many pairs at once keep the servers busy, so that a create is in
	// flight long enough for the other to meet it.
	const rounds, width = 10, 40
	for round := range rounds {
		var wg sync.WaitGroup
		for i := range width {
			r := task.New("b", fmt.Sprintf("m%d-%d", round, i), time.Now())
			r.Chat, r.ChatType, r.User, r.Question = fmt.Sprintf("c%d", i), "single", "u", "q"
			m := task.MessageOf(r)
			for side, open := range map[string]func() error{
				"the leader's Open":  func() error { _, err := leader.Open(ctx, r); return err },
				"the worker's Start": func() error { _, _, err := worker.Start(ctx, m, "queue", 1); return err },
			} {
				wg.Go(func() {
					if err := open(); err != nil {
						mu.Lock()
						failed++
						mu.Unlock()
						t.Logf("%s: %v", side, err)
					}
				})
			}
		}
		wg.Wait()
	}
	if failed > 0 {
		t.Fatalf("%d of %d racing opens failed", failed, 2*rounds*width)
	}
}

// A queue delivery that comes before the leader's Open (the leader
// publishes the task, then writes its record) waits for the record rather
// than racing the leader with a create of its own: the record is created
// once, by the leader, with the leader's fields, and the attempt starts on
// it. A record still missing after the wait is opened by the worker.
func TestStartWaitsForTheLeadersOpen(t *testing.T) {
	task.SetOpenWaitTries(t, 40) // about 3 s: the test's Open comes well within it
	f := newFixture(t, jetstream.Options{})
	bucket := "$KV." + f.env.Store.Names().TasksBucket + "."
	creates := countOn(t, f, []string{bucket + ">"}, func(m *nats.Msg) bool {
		return m.Header.Get(nats.ExpectedLastSubjSeqHdr) == "0"
	})
	gets := countOn(t, f, []string{"$JS.API.DIRECT.GET.>", "$JS.API.STREAM.MSG.GET.>"}, func(m *nats.Msg) bool {
		return strings.Contains(m.Subject, "KV_"+f.env.Store.Names().TasksBucket)
	})
	r := task.New("b", "m1", time.Now())
	r.Chat, r.ChatType, r.User, r.Question, r.ReqID = "alice", "single", "alice", "q", "req-of-the-leader"
	m := task.MessageOf(r)
	m.ReqID = "" // what the worker has of it: not the leader's req_id (the merge's proof)

	type started struct {
		attempt int
		err     error
	}
	done := make(chan started, 1)
	go func() {
		a, _, err := f.lc.Start(f.ctx, m, "queue", 1)
		done <- started{a, err}
	}()
	testwait.Eventually(t, 10*time.Second, "the worker's first read", func() bool { return gets() >= 1 })
	if _, err := f.lc.Open(f.ctx, r); err != nil {
		t.Fatalf("the leader's Open: %v", err)
	}
	s := <-done
	if s.err != nil || s.attempt != 1 {
		t.Fatalf("Start: attempt %d, %v", s.attempt, s.err)
	}
	if n := creates(); n != 1 {
		t.Fatalf("the record was created %d times, want once (the leader's)", n)
	}
	if got := f.record(r.ID); got.Exec != task.Running || got.ReqID != "req-of-the-leader" {
		t.Fatalf("record: exec %s, req_id %q", got.Exec, got.ReqID)
	}

	// Nobody opens it: the worker does, after the wait.
	task.SetOpenWaitTries(t, 2)
	lone := task.New("b", "m2", time.Now())
	lone.Chat, lone.ChatType, lone.User, lone.Question = "bob", "single", "bob", "q"
	if a, _, err := f.lc.Start(f.ctx, task.MessageOf(lone), "queue", 1); err != nil || a != 1 {
		t.Fatalf("Start of a task nobody opened: attempt %d, %v", a, err)
	}
	if got := f.record(lone.ID); got.Exec != task.Running {
		t.Fatalf("record opened by the worker: exec %s", got.Exec)
	}
}
