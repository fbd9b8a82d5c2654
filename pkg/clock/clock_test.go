package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
	"github.com/botctl/botctl/pkg/clock"
)

func TestOrIsRealForNil(t *testing.T) {
	if clock.Or(nil) != clock.Real {
		t.Fatal("Or(nil) is not Real")
	}
	f := fakeclock.New(time.Now())
	if clock.Or(f) != f {
		t.Fatal("Or(c) is not c")
	}
}

func TestSleep(t *testing.T) {
	f := fakeclock.New(time.Now())
	done := make(chan bool)
	go func() { done <- clock.Sleep(context.Background(), f, time.Hour) }()
	f.AwaitWaiters(t, 1)
	f.Step(time.Hour)
	if !<-done {
		t.Fatal("a sleep that ran its course reported an ended context")
	}
	if f.HasWaiters() {
		t.Fatal("Sleep left its timer waiting")
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- clock.Sleep(ctx, f, time.Hour) }()
	f.AwaitWaiters(t, 1)
	cancel()
	if <-done {
		t.Fatal("a sleep whose context ended reported the whole hour passed")
	}
	if f.HasWaiters() {
		t.Fatal("Sleep left its timer waiting after ctx ended")
	}
	if !clock.Sleep(context.Background(), nil, time.Millisecond) {
		t.Fatal("a sleep on the real clock (nil) did not run its course")
	}
}
