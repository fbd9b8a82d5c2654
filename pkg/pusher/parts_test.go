package pusher_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// gateFunc is a pusher.Gate that calls itself before each pushed part
// with the number of the call (from 1), and lets every part go.
type gateFunc struct {
	mu    sync.Mutex
	calls int
	f     func(n int)
}

func (g *gateFunc) Wait(time.Time) time.Duration {
	g.mu.Lock()
	g.calls++
	n := g.calls
	g.mu.Unlock()
	g.f(n)
	return 0
}

// longAnswer is an answer pushed in several parts, and those parts.
func longAnswer() (string, []string) {
	para := strings.Repeat("段", 4000) // 12000 bytes: one paragraph per part
	full := strings.Join([]string{"one " + para, "two " + para, "three " + para, "four " + para}, "\n\n")
	return full, pusher.Split(full, wecom.MaxContentBytes)
}

// pushed is the content of every part pushed to chat (markdown), in order.
func (r *rig) pushed(chat string) []string {
	var out []string
	for _, m := range r.botMessages(chat) {
		if m.Kind == "markdown" {
			out = append(out, m.Content)
		}
	}
	return out
}

// setTaskMsgSize sets the largest message the task bucket takes (-1: no
// limit): below a record's size, every record write fails on the server.
func (r *rig) setTaskMsgSize(size int32) {
	r.t.Helper()
	ctx := context.Background()
	s, err := r.js.JS.Stream(ctx, "KV_"+r.js.Store.Tasks().Bucket())
	if err != nil {
		r.t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgSize = size
	if _, err := r.js.JS.UpdateStream(ctx, cfg); err != nil {
		r.t.Fatal(err)
	}
}

// A part WeCom acked whose count could not be written (the task bucket
// refused the write) is not pushed again: the pusher writes the count
// again and goes on with the next part. Each part reaches the user once.
func TestAckedPartWhoseCountWasNotWrittenIsNotPushedAgain(t *testing.T) {
	r := newRig(t, wecomsim.Config{})
	full, parts := longAnswer()
	var failed sync.Once
	writeFailed := make(chan struct{})
	r.start(pusher.Config{
		// Before the first part is sent, the task bucket stops taking
		// writes: that part is acked, its count's write fails.
		Gate: &gateFunc{f: func(n int) {
			if n == 1 {
				r.setTaskMsgSize(64)
			}
		}},
		// The failed write heard: the bucket takes writes again.
		Metrics: natsErrorFunc(func(op string) {
			if op == "record_write" {
				failed.Do(func() { r.setTaskMsgSize(-1); close(writeFailed) })
			}
		}),
	})
	rec := r.ask("alice", "long")
	r.write(rec.ID, full, true) // too long for one frame: closed, then pushed
	r.waitDelivery(rec.ID, task.Delivered)
	select {
	case <-writeFailed:
	default:
		t.Fatal("no record write failed: the test made no fault")
	}
	got := r.pushed("alice")
	if len(got) != len(parts) || strings.Join(got, "\n\n") != full {
		t.Fatalf("the user got %d pushed parts, want each of the %d once", len(got), len(parts))
	}
	if stored := r.record(rec.ID); stored.PushedParts != len(parts) {
		t.Fatalf("pushed_parts = %d, want %d", stored.PushedParts, len(parts))
	}
}

// An operator's redeliver in the middle of a push: the count the old
// push writes afterwards (its part was on its way) does not move the new
// push on, which pushes the whole answer again, from its first part.
func TestPartCountFromBeforeARedeliverSkipsNothing(t *testing.T) {
	r := newRig(t, wecomsim.Config{})
	full, parts := longAnswer()
	var mu sync.Mutex
	var id string
	redelivered := make(chan struct{})
	r.start(pusher.Config{
		Gate: &gateFunc{f: func(n int) {
			if n == 2 { // part 1 recorded, part 2 about to go
				mu.Lock()
				defer mu.Unlock()
				if _, err := r.lc.Redeliver(context.Background(), id, "operator: redeliver"); err != nil {
					t.Error(err)
				}
				close(redelivered)
			}
		}},
	})
	rec := r.ask("alice", "long")
	mu.Lock()
	id = rec.ID
	mu.Unlock()
	r.write(rec.ID, full, true)
	select {
	case <-redelivered:
	case <-time.After(waitLong):
		t.Fatal("the push never reached its second part")
	}
	r.waitDelivery(rec.ID, task.Delivered) // reopened by the redeliver: this is its end
	got := r.pushed("alice")
	// Parts 1 and 2 of the first push, then every part of the redelivery.
	if len(got) != len(parts)+2 || strings.Join(got[2:], "\n\n") != full {
		t.Fatalf("the user got %d pushed parts, want 2 then all %d again", len(got), len(parts))
	}
	if stored := r.record(rec.ID); stored.PushedParts != len(parts) {
		t.Fatalf("pushed_parts = %d, want %d", stored.PushedParts, len(parts))
	}
}
