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
	var n atomic.Int32
	res := hedged(ctx, c, after, func(ctx context.Context) (int32, error) {
		i := n.Add(1)
		if i == 1 {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return i, nil
	})
	c.AwaitWaiters(t, 1)
	c.Step(after - time.Millisecond)
	if n.Load() != 1 {
		t.Fatalf("%d attempts before the hedge's delay passed, want 1", n.Load())
	}
	c.Step(time.Millisecond)
	if r := <-res; r.err != nil || r.v != 2 {
		t.Fatalf("hanging first attempt: %d, %v; want the second's answer", r.v, r.err)
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
	for range hedgeAttempts - 1 {
		c.AwaitWaiters(t, 1)
		c.Step(after)
	}
	for i := 0; i < 10; i++ { // the hedge's timer is not armed again
		c.Step(time.Hour)
	}
	cancel()
	if r := <-res; !errors.Is(r.err, context.Canceled) || n.Load() != hedgeAttempts {
		t.Fatalf("all hanging: %v after %d attempts, want the context's end after %d", r.err, n.Load(), hedgeAttempts)
	}
}
