package worker_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/worker"
	"github.com/rs/zerolog"
)

// BenchmarkRunningTaskMemory measures what one running task costs a node:
// heap and goroutine stacks in use with n tasks running (demo backend,
// answers long enough to outlast the measurement) against none, divided
// by n. It includes the embedded NATS server's state for n
// delivered messages and n output keys (in this process), so it is an
// upper bound for the worker itself. Reported as bytes/task.
func BenchmarkRunningTaskMemory(b *testing.B) {
	const n = 1000
	for range b.N {
		env := testenv.StartJetStream(b, jetstream.Options{})
		w, err := worker.New(worker.Config{NodeID: "w1", Backend: demo(b, 10*time.Minute), Store: env.Store,
			Slots: n, Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		before := inUse()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); w.Run(ctx) }()
		for i := range n {
			publish(b, env.Store, fmt.Sprintf("m%d", i), fmt.Sprintf("chat%d", i), fmt.Sprintf("question %d", i))
		}
		deadline := time.Now().Add(2 * time.Minute)
		for w.Busy() < n {
			if time.Now().After(deadline) {
				b.Fatalf("only %d of %d tasks running", w.Busy(), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(3 * time.Second) // a few output writes each: their buffers count too
		after := inUse()
		b.ReportMetric(float64(after-before)/n, "bytes/task")
		cancel()
		<-done
	}
}

// inUse is heap in use plus goroutine stacks, after a collection.
func inUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}
