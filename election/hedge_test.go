package election

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
)

// hedged runs hedge on c in a goroutine; its result arrives on the channel.
func hedged(ctx context.Context, c *fakeclock.Clock, after time.Duration, try func(context.Context) (int32, error)) <-chan hedgeResult {
	out := make(chan hedgeResult, 1)
	go func() {
		v, err := hedge(ctx, c, after, try)
		out <- hedgeResult{v, err}
	}()
	return out
}

type hedgeResult struct {
	v   int32
	err error
}

func TestHedge(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	const after = 10 * time.Millisecond

	// The first hangs: the second answers, started once after passed.
	c := fakeclock.New(time.Now())
	t0 := c.Now()
	var n atomic.Int32
	var second atomic.Int64 // when the second attempt started, after t0
	res := hedged(ctx, c, after, func(ctx context.Context) (int32, error) {
		i := n.Add(1)
		if i == 1 {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		second.Store(int64(c.Since(t0)))
		return i, nil
	})
	select {
	case r := <-res:
		t.Fatalf("hanging first attempt: answered %d, %v before the clock moved", r.v, r.err)
	case <-c.Waiting(t, 1):
	}
	c.Step(after)
	if r := <-res; r.err != nil || r.v != 2 {
		t.Fatalf("hanging first attempt: %d, %v; want the second's answer", r.v, r.err)
	}
	if at := time.Duration(second.Load()); at != after {
		t.Fatalf("the second attempt started %s after the first, want %s", at, after)
	}

	// The first fails at once: its error, no second attempt.
	n.Store(0)
	if _, err := hedge(ctx, fakeclock.New(time.Now()), time.Hour, func(ctx context.Context) (int32, error) { n.Add(1); return 0, boom }); !errors.Is(err, boom) || n.Load() != 1 {
		t.Fatalf("failing first attempt: %v after %d attempts, want boom after 1", err, n.Load())
	}

	// One hangs, the hedge fails at once: a third is tried, and answers.
	c = fakeclock.New(time.Now())
	n.Store(0)
	res = hedged(ctx, c, after, func(ctx context.Context) (int32, error) {
		switch i := n.Add(1); i {
		case 1:
			<-ctx.Done()
			return 0, ctx.Err()
		case 2:
			return 0, boom
		default:
			return i, nil
		}
	})
	c.AwaitWaiters(t, 1)
	c.Step(after)
	if r := <-res; r.err != nil || r.v != 3 {
		t.Fatalf("hang, fail: %d, %v; want the third's answer", r.v, r.err)
	}

	// Every attempt hangs until the context ends: its error, never more
	// than hedgeAttempts however long they hang.
	c = fakeclock.New(time.Now())
	n.Store(0)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res = hedged(cctx, c, after, func(ctx context.Context) (int32, error) {
		n.Add(1)
		<-ctx.Done()
		return 0, ctx.Err()
	})
	for range hedgeAttempts { // the last step passes the delay after the last attempt
		c.AwaitWaiters(t, 1)
		c.Step(after)
	}
	// The hedge waits on the clock no more (a negative check: armed again,
	// its timer would wait within microseconds).
	wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := c.BlockUntilContext(wctx, 1)
	wcancel()
	if err == nil {
		t.Fatalf("the hedge still waits on the clock after its %d attempts", hedgeAttempts)
	}
	cancel()
	if r := <-res; !errors.Is(r.err, context.Canceled) || n.Load() != hedgeAttempts {
		t.Fatalf("all hanging: %v after %d attempts, want the context's end after %d", r.err, n.Load(), hedgeAttempts)
	}
}
