package pusher_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// A progress frame held back by the conversation's send budget (other
// sends used it) would show, once a send slot frees, the version that was
// latest when the hold began; the pusher asks the worker for its text
// first (a flush request to the record's node) and shows the fresher
// version it writes. The flush wait is longer than the test waits, so
// the frame can only come from the version's arrival ending the wait
// (checked: without that wake the test times out). Without the request
// (askFresh disabled, checked once) the frame shows the held version.
func TestHeldFrameShowsTheTextAFlushBrings(t *testing.T) {
	pusher.SetFlushWait(t, 10*time.Minute)
	if shown := heldFrame(t, true); shown != "v1 v2 v3" {
		t.Fatalf("the held frame shows %q, want the worker's text of the moment %q", shown, "v1 v2 v3")
	}
}

// A worker that does not answer the flush request (an older botctl, a
// fixed worker off NATS) costs the frame one wait: it then shows the
// version it held, and the task is not asked again within the gap.
func TestUnansweredFlushCostsOneWait(t *testing.T) {
	t.Parallel()
	if shown := heldFrame(t, false); shown != "v1 v2" {
		t.Fatalf("the held frame shows %q, want the held version %q", shown, "v1 v2")
	}
}

// A version stamped long ago by its worker's clock (one behind this
// node's, within nats.max_clock_skew) but just delivered by the watch is
// not stale: it is shown at once, with no flush request (the flush wait
// is longer than the test waits). Fails when staleness is judged by the
// stamp alone (checked).
func TestVersionFromAWorkerClockBehindIsShownWithoutAFlush(t *testing.T) {
	pusher.SetFlushWait(t, 10*time.Minute)
	r := newClockRig(t)
	// The progress gap after the receipt passes (not the record's
	// refresh): the frame is not held, and the watch's arrival is what
	// steps the task.
	r.ahead.Store(int64(10 * time.Second))
	if err := r.version("v1", func() time.Time { return r.now().Add(-4 * time.Second) }); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitLong, "the version shown", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content == "v1"
	})
	if s := r.p.Stats(); s.Flushes != 0 {
		t.Fatalf("stats %+v, want no flush", s)
	}
}

// clockRig is a rig whose budget and pusher share a clock the test moves
// on (ahead), with alice's task asked and its attempt started.
type clockRig struct {
	*rig
	ahead   atomic.Int64
	rec     *task.Record
	attempt int
}

func newClockRig(t *testing.T) *clockRig {
	t.Helper()
	return newClockRigWith(t, nil)
}

// newClockRigWith is newClockRig with the pusher's Config cfg makes on
// the rig's clock now (nil: the default).
func newClockRigWith(t *testing.T, cfg func(now func() time.Time) pusher.Config) *clockRig {
	t.Helper()
	r := &clockRig{rig: newRig(t, wecomsim.Config{})}
	r.budget = pace.New(20, time.Minute, r.now)
	var c pusher.Config
	if cfg != nil {
		c = cfg(r.now)
	}
	c.Heartbeat, c.Now = time.Hour, r.now
	r.start(c)
	r.rec = r.ask("alice", "hi")
	var err error
	if r.attempt, _, err = r.lc.Start(context.Background(), task.MessageOf(r.record(r.rec.ID)), "queue", 1); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *clockRig) now() time.Time { return time.Now().Add(time.Duration(r.ahead.Load())) }

// version plays the task's worker: it writes text, stamped by clock.
func (r *clockRig) version(text string, clock func() time.Time) error {
	lc := task.NewLifecycle(r.js.Store, "n1", zerolog.Nop()).WithClock(clock)
	return lc.Output(r.rec.ID, "b", r.attempt).Write(context.Background(), text)
}

// heldFrame shows v1, holds the frame of v2 by using the conversation's
// budget up, then frees it: the clock the budget and the pusher share is
// moved on by a minute, and the held version is then a minute old by it.
// The test plays the worker: when answer, it answers the (first) flush
// request by writing v3. It returns what the frame after v1 shows, and
// checks that it was the only frame after v1 and one request was made.
func heldFrame(t *testing.T, answer bool) string {
	t.Helper()
	r := newClockRig(t)
	rec, now := r.rec, r.now
	write := func(text string, clock func() time.Time) {
		t.Helper()
		if err := r.version(text, clock); err != nil {
			t.Error(err)
		}
	}
	// Stamped ahead: never stale, however long a loaded machine takes to
	// show it.
	write("v1", func() time.Time { return now().Add(time.Hour) })
	testwait.Eventually(t, waitLong, "the first version shown", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content == "v1"
	})
	frames := r.stats().Frames[wecom.CmdRespondMsg]

	// The worker: when answer, a flush request for the task writes v3,
	// stamped by the pusher's clock.
	var asked atomic.Int32
	subject := r.js.Store.Names().FlushSubjectPrefix + "." + jetstream.EncodeToken(r.record(rec.ID).Node)
	sub, err := r.js.Store.JetStream().Conn().Subscribe(subject, func(m *nats.Msg) {
		if string(m.Data) == rec.ID && asked.Add(1) == 1 && answer {
			write("v1 v2 v3", now)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := r.js.Store.JetStream().Conn().Flush(); err != nil {
		t.Fatal(err)
	}

	// Other sends use the budget up; v2 is written and its frame held.
	for r.budget.Remaining("alice") > 0 {
		r.budget.Record("alice")
	}
	throttled := r.p.Stats().Throttled
	write("v1 v2", now)
	testwait.Eventually(t, waitLong, "v2's frame held by the budget", func() bool { return r.p.Stats().Throttled > throttled })
	if asked.Load() != 0 {
		t.Fatal("flush requested while the frame could not be sent")
	}

	r.ahead.Store(int64(time.Minute + time.Second)) // the budget's window passes
	testwait.Eventually(t, waitLong, "the held frame sent", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content != "v1"
	})
	if n := r.stats().Frames[wecom.CmdRespondMsg] - frames; n != 1 {
		t.Fatalf("%d frames after v1, want 1 (none of a version it did not show last)", n)
	}
	// The request reaches the test's worker on a goroutine of its own:
	// unanswered, the frame went after the pusher's wait, which does not
	// wait for the request to be heard.
	testwait.Eventually(t, waitLong, "the flush request heard", func() bool { return asked.Load() > 0 })
	if n := asked.Load(); n != 1 {
		t.Fatalf("%d flush requests, want 1", n)
	}
	if s := r.p.Stats(); s.Flushes != 1 {
		t.Fatalf("stats %+v, want 1 flush", s)
	}
	return r.botMessages("alice")[0].Content
}
