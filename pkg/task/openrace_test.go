package task_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/dataplane"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/pkg/task"
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
	stA, _ := testenv.DeclareOnCluster(t, urls[:1], dataplane.Options{Replicas: 3})
	stB, _ := testenv.DeclareOnCluster(t, urls[1:2], dataplane.Options{Replicas: 3})
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
