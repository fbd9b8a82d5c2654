package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/worker"
)

// A fetch that ends in an error is counted and tried again after a
// pause, not at once. Here the workers' consumer is gone, so every pull
// request has no responders, as while every NATS server of a cluster
// restarts and JetStream has no leaders yet: retried at once, the loop
// sent hundreds of pull requests a second to servers that were
// recovering, and took a core with it.
func TestFetchErrorsArePaced(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	counter := &opCounter{heard: map[string]int{}}
	fetchErrors := func() int {
		counter.mu.Lock()
		defer counter.mu.Unlock()
		return counter.heard["fetch"]
	}
	runWith(t, worker.Config{NodeID: "w1", Backend: demo(t, 10*time.Millisecond), Store: env.Store, Metrics: counter})

	info := env.Store.Workers().CachedInfo()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := env.JS.DeleteConsumer(ctx, info.Stream, info.Name); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitLong, "a fetch failing", func() bool { return fetchErrors() > 0 })
	from := fetchErrors()
	const window = 3 * time.Second
	time.Sleep(window) // a rate is counted over a window: no event ends it
	// About one a second.
	if n := fetchErrors() - from; n > 5 {
		t.Fatalf("%d fetches failed in %s: retried without a pause (want at most 5)", n, window)
	}
}
