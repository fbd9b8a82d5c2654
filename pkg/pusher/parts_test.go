package pusher_test

import (
	"context"
	"fmt"
	"slices"
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

// longAnswer is an answer too long for one frame, and its parts: the
// first the stream's final frame, the rest pushed.
func longAnswer() (string, []string) {
	para := strings.Repeat("段", 4000) // 12000 bytes: one paragraph per part
	full := strings.Join([]string{"one " + para, "two " + para, "three " + para, "four " + para}, "\n\n")
	return full, pusher.Parts(full, wecom.MaxContentBytes)
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
	t.Parallel()
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
	r.write(rec.ID, full, true) // too long for one frame: part 1 streamed, the rest pushed
	r.waitDelivery(rec.ID, task.Delivered)
	select {
	case <-writeFailed:
	default:
		t.Fatal("no record write failed: the test made no fault")
	}
	got := r.pushed("alice")
	if !slices.Equal(got, parts[1:]) {
		t.Fatalf("the user got %d pushed parts, want each of the %d after the streamed first once", len(got), len(parts)-1)
	}
	if stored := r.record(rec.ID); stored.PushedParts != len(parts) {
		t.Fatalf("pushed_parts = %d, want %d", stored.PushedParts, len(parts))
	}
}

// An operator's redeliver in the middle of a push: the count the old
// push writes afterwards (its part was on its way) does not move the new
// push on, which pushes the whole answer again, from its first part.
func TestPartCountFromBeforeARedeliverSkipsNothing(t *testing.T) {
	t.Parallel()
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
	// Parts 2 and 3 of the first push (its part 1 was the stream's final
	// frame), then every part of the redelivery.
	if len(got) != len(parts)+2 || !slices.Equal(got[2:], parts) {
		t.Fatalf("the user got %d pushed parts, want 2 then all %d again", len(got), len(parts))
	}
	if stored := r.record(rec.ID); stored.PushedParts != len(parts) {
		t.Fatalf("pushed_parts = %d, want %d", stored.PushedParts, len(parts))
	}
}

// unlabel checks that parts are labelled "(1/n)" … "(n/n)" in order (a
// lone part unlabelled) and rebuilds the answer they were cut from at
// paragraph boundaries.
func unlabel(t *testing.T, parts []string) string {
	t.Helper()
	if len(parts) == 1 {
		return parts[0]
	}
	var texts []string
	for i, p := range parts {
		l := fmt.Sprintf("(%d/%d)\n\n", i+1, len(parts))
		if !strings.HasPrefix(p, l) {
			t.Fatalf("part %d of %d starts %q, want its label %q", i+1, len(parts), p[:min(len(p), 12)], l)
		}
		texts = append(texts, strings.TrimPrefix(p, l))
	}
	return strings.Join(texts, "\n\n")
}

// Parts cuts at paragraphs, each part with its label within the limit;
// a text that fits is one part, unlabelled; the label's width grows with
// the count.
func TestParts(t *testing.T) {
	t.Parallel()
	if got := pusher.Parts("short", 100); len(got) != 1 || got[0] != "short" {
		t.Fatalf("Parts of a short text = %q", got)
	}
	para := strings.Repeat("x", 40)
	var paras []string
	for range 30 {
		paras = append(paras, para)
	}
	full := strings.Join(paras, "\n\n")
	for _, limit := range []int{60, 100, 2000} {
		parts := pusher.Parts(full, limit)
		for i, p := range parts {
			if len(p) > limit {
				t.Fatalf("limit %d: part %d is %d bytes", limit, i+1, len(p))
			}
		}
		if got := unlabel(t, parts); got != full {
			t.Fatalf("limit %d: parts do not rebuild the text", limit)
		}
		if limit == 60 && len(parts) != 30 {
			t.Fatalf("limit 60: %d parts, want 30 (one paragraph each, two-digit labels)", len(parts))
		}
	}
}

// Each path an answer too long for one frame can take reaches the user
// split into labelled parts that rebuild it: the stream (its final frame
// the first part, the rest pushed), and the push of an answer whose
// stream began under another term (the handoff). The window's close is
// TestWindowTruncatesThenPushesSplit's.
func TestLongAnswerSplitOnEveryPath(t *testing.T) {
	t.Parallel()
	full, parts := longAnswer()
	t.Run("stream", func(t *testing.T) {
		r := newRig(t, wecomsim.Config{})
		r.start(pusher.Config{})
		rec := r.ask("alice", "long")
		r.write(rec.ID, full, true)
		r.waitDelivery(rec.ID, task.Delivered)
		bot := r.botMessages("alice")
		if len(bot) != len(parts) || bot[0].Kind != "stream" || !bot[0].Finished || bot[0].Content != parts[0] {
			t.Fatalf("user sees %d messages, the first %+v", len(bot), bot[0].Kind)
		}
		var got []string
		for _, m := range bot {
			got = append(got, m.Content)
		}
		if unlabel(t, got) != full || !slices.Equal(r.pushed("alice"), parts[1:]) {
			t.Fatal("the stream's part and the pushed ones do not rebuild the answer")
		}
		if stored := r.record(rec.ID); stored.PushedParts != len(parts) {
			t.Fatalf("pushed_parts = %d, want %d", stored.PushedParts, len(parts))
		}
	})
	t.Run("handoff", func(t *testing.T) {
		r := newRig(t, wecomsim.Config{})
		rec := r.ask("alice", "long") // its stream on term 1
		r.connect(2)
		r.start(pusher.Config{})
		r.write(rec.ID, full, true)
		r.waitDelivery(rec.ID, task.Delivered)
		if got := r.pushed("alice"); !slices.Equal(got, parts) {
			t.Fatalf("pushed %d parts, want the %d labelled", len(got), len(parts))
		}
	})
}
