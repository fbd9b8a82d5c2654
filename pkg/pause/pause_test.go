package pause

import (
	"context"
	"testing"
	"time"
)

func TestFor(t *testing.T) {
	if !For(context.Background(), time.Millisecond) {
		t.Fatal("a wait that ran its course reported an ended context")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if For(ctx, time.Hour) {
		t.Fatal("a wait on an ended context reported the whole hour passed")
	}
	if time.Since(start) > time.Minute {
		t.Fatal("a wait on an ended context did not end at once")
	}
}
