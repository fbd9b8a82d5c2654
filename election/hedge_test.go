package election

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestHedge(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")

	// The first hangs: the second answers.
	var n atomic.Int32
	v, err := hedge(ctx, 10*time.Millisecond, func(ctx context.Context) (int32, error) {
		i := n.Add(1)
		if i == 1 {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return i, nil
	})
	if err != nil || v != 2 {
		t.Fatalf("hanging first attempt: %d, %v; want the second's answer", v, err)
	}

	// The first fails at once: its error, no second attempt.
	n.Store(0)
	if _, err := hedge(ctx, time.Hour, func(ctx context.Context) (int32, error) { n.Add(1); return 0, boom }); !errors.Is(err, boom) || n.Load() != 1 {
		t.Fatalf("failing first attempt: %v after %d attempts, want boom after 1", err, n.Load())
	}

	// One hangs, the hedge fails at once: a third is tried, and answers.
	n.Store(0)
	v, err = hedge(ctx, 10*time.Millisecond, func(ctx context.Context) (int32, error) {
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
	if err != nil || v != 3 {
		t.Fatalf("hang, fail: %d, %v; want the third's answer", v, err)
	}

	// Every attempt fails: the last error, never more than hedgeAttempts.
	n.Store(0)
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = hedge(cctx, 10*time.Millisecond, func(ctx context.Context) (int32, error) {
		n.Add(1)
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) || n.Load() != hedgeAttempts {
		t.Fatalf("all hanging: %v after %d attempts, want the deadline after %d", err, n.Load(), hedgeAttempts)
	}
}
