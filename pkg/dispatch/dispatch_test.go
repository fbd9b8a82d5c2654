package dispatch_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/dispatch"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

// queueFunc, spoolFuncs, localFunc and natsErrors give the tiers and
// the metrics a test's own behaviour.
type queueFunc func(ctx context.Context, bot, conv, msgid string, p []byte) (jetstream.PublishResult, error)

func (f queueFunc) PublishTask(ctx context.Context, bot, conv, msgid string, p []byte) (jetstream.PublishResult, error) {
	return f(ctx, bot, conv, msgid, p)
}

type spoolFuncs struct {
	keep  func(task.Message, []byte) error
	holds func(bot, conv string) bool
}

func (s spoolFuncs) Keep(m task.Message, p []byte) error {
	if s.keep == nil {
		return errors.New("no spool")
	}
	return s.keep(m, p)
}

func (s spoolFuncs) Holds(bot, conv string) bool { return s.holds != nil && s.holds(bot, conv) }

type localFunc func(task.Message) error

func (f localFunc) Start(m task.Message) error { return f(m) }

type natsErrors func(op string)

func (f natsErrors) NATSError(op string) { f(op) }

type tiers struct {
	fixedCalls atomic.Int32
	fixedCode  atomic.Int32
	localCalls atomic.Int32
	localErr   error
	spooled    atomic.Int32
}

func setup(t *testing.T) (*testenv.JetStream, *tiers, *dispatch.Dispatcher) {
	t.Helper()
	env := testenv.StartJetStream(t, jetstream.Options{})
	tr := &tiers{}
	tr.fixedCode.Store(http.StatusAccepted)
	fixed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != dispatch.ExecPath {
			http.NotFound(w, r)
			return
		}
		tr.fixedCalls.Add(1)
		w.WriteHeader(int(tr.fixedCode.Load()))
	}))
	t.Cleanup(fixed.Close)
	d, err := dispatch.New(dispatch.Config{
		Queue:       env.Store,
		Spool:       spoolFuncs{keep: func(task.Message, []byte) error { tr.spooled.Add(1); return nil }},
		FixedWorker: fixed.URL,
		Local:       localFunc(func(task.Message) error { tr.localCalls.Add(1); return tr.localErr }),
		Logger:      zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return env, tr, d
}

func msg(id, chat string) task.Message {
	return task.Message{TaskID: task.ID("b", id), Bot: "b", MsgID: id, Chat: chat, Question: "q"}
}

func TestQueueDuplicateAndBusyIsAnAnswer(t *testing.T) {
	_, tr, d := setup(t)
	ctx := context.Background()
	out, err := d.Dispatch(ctx, msg("m1", "alice"))
	if err != nil || out.Tier != dispatch.TierQueue || out.Busy || out.Duplicate {
		t.Fatalf("first: %+v %v", out, err)
	}
	out, err = d.Dispatch(ctx, msg("m1", "alice"))
	if err != nil || !out.Duplicate {
		t.Fatalf("same msgid: %+v %v, want duplicate", out, err)
	}
	// The red line: a busy conversation is an answer; no other tier runs it.
	for range 5 {
		out, err = d.Dispatch(ctx, msg("m2", "alice"))
		if err != nil || !out.Busy {
			t.Fatalf("busy conversation: %+v %v", out, err)
		}
	}
	if tr.fixedCalls.Load() != 0 || tr.localCalls.Load() != 0 || tr.spooled.Load() != 0 {
		t.Fatalf("busy task went elsewhere: fixed %d local %d spooled %d", tr.fixedCalls.Load(), tr.localCalls.Load(), tr.spooled.Load())
	}
	// Another conversation is not busy.
	if out, err = d.Dispatch(ctx, msg("m3", "bob")); err != nil || out.Busy {
		t.Fatalf("other conversation: %+v %v", out, err)
	}
	s := d.Stats()
	if s.Queued != 2 || s.Busy != 5 || s.Duplicates != 1 || len(s.Fallbacks) != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestUnavailableFallsBackThroughTiers(t *testing.T) {
	env, tr, d := setup(t)
	env.Server.Close() // JetStream gone
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	out, err := d.Dispatch(ctx, msg("m1", "alice"))
	if err != nil || out.Tier != dispatch.TierFixed || !out.Spooled {
		t.Fatalf("queue down: %+v %v, want fixed tier and spooled", out, err)
	}
	tr.fixedCode.Store(http.StatusServiceUnavailable)
	out, err = d.Dispatch(ctx, msg("m2", "alice"))
	if err != nil || out.Tier != dispatch.TierLocal || !out.Spooled {
		t.Fatalf("queue and fixed down: %+v %v, want local tier", out, err)
	}
	s := d.Stats()
	if s.Fallbacks["queue→fixed"] != 2 || s.Fallbacks["fixed→local"] != 1 || s.Fixed != 1 || s.Local != 1 {
		t.Fatalf("fallbacks not counted: %+v", s)
	}
}

// The inbound path learns whether a message is a duplicate beside the
// publish. The queue's answer needs no asking; but a duplicate the queue
// cannot take goes no further: not spooled, not run by a fixed worker or
// locally (a local Start would supersede the original's running attempt).
func TestDuplicateGoesToNoFallbackTier(t *testing.T) {
	env, tr, d := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var asked atomic.Int32
	dup := func() bool { asked.Add(1); return true }
	if out, err := d.DispatchUnless(ctx, msg("m1", "alice"), dup); err != nil || out.Tier != dispatch.TierQueue || out.Duplicate {
		t.Fatalf("queue up: %+v %v, want queued (the caller knows dup's answer)", out, err)
	}
	if asked.Load() != 0 {
		t.Fatalf("dup asked %d times with the queue up, want 0 (off the receipt's path)", asked.Load())
	}
	env.Server.Close() // JetStream gone
	out, err := d.DispatchUnless(ctx, msg("m2", "bob"), dup)
	if err != nil || !out.Duplicate || out.Spooled || out.Tier != "" {
		t.Fatalf("queue down, a duplicate: %+v %v, want Duplicate and nothing else", out, err)
	}
	if tr.fixedCalls.Load() != 0 || tr.localCalls.Load() != 0 || tr.spooled.Load() != 0 {
		t.Fatalf("a duplicate went elsewhere: fixed %d local %d spooled %d", tr.fixedCalls.Load(), tr.localCalls.Load(), tr.spooled.Load())
	}
	out, err = d.DispatchUnless(ctx, msg("m3", "carol"), func() bool { return false })
	if err != nil || out.Tier != dispatch.TierFixed || !out.Spooled {
		t.Fatalf("queue down, not a duplicate: %+v %v, want fixed tier and spooled", out, err)
	}
}

func TestNoTierAndNoSpoolIsAnError(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	d, _ := dispatch.New(dispatch.Config{Queue: env.Store, Local: localFunc(func(task.Message) error { return errors.New("no slots") }), Logger: zerolog.Nop()})
	env.Server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.Dispatch(ctx, msg("m1", "alice")); !errors.Is(err, dispatch.ErrNoTier) {
		t.Fatalf("err = %v, want ErrNoTier", err)
	}
}

// A conversation whose task waits in the spool is busy: a later message is
// answered "busy" and goes to no tier, so it cannot overtake the spooled one.
func TestSpooledConversationIsBusy(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	var published, local atomic.Int32
	d, err := dispatch.New(dispatch.Config{
		Queue: queueFunc(func(ctx context.Context, bot, conv, msgid string, p []byte) (jetstream.PublishResult, error) {
			published.Add(1)
			return env.Store.PublishTask(ctx, bot, conv, msgid, p)
		}),
		Spool:  spoolFuncs{holds: func(bot, conv string) bool { return conv == "alice" }},
		Local:  localFunc(func(task.Message) error { local.Add(1); return nil }),
		Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := d.Dispatch(context.Background(), msg("m2", "alice"))
	if err != nil || !out.Busy || published.Load() != 0 || local.Load() != 0 {
		t.Fatalf("spooled conversation: %+v %v (published %d, local %d)", out, err, published.Load(), local.Load())
	}
	if out, err := d.Dispatch(context.Background(), msg("m3", "bob")); err != nil || out.Busy || out.Tier != dispatch.TierQueue {
		t.Fatalf("other conversation: %+v %v", out, err)
	}
}

// NATSError hears every publish JetStream did not confirm, and nothing
// else: not a queued task, not a duplicate, not a busy conversation (the
// red line: an answer, not a failure).
func TestNATSErrorHearsFailedPublishesOnly(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	var ops []string
	d, err := dispatch.New(dispatch.Config{Queue: env.Store, Spool: spoolFuncs{keep: func(task.Message, []byte) error { return nil }},
		Metrics: natsErrors(func(op string) { ops = append(ops, op) }), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range []task.Message{msg("m1", "alice"), msg("m1", "alice"), msg("m2", "alice")} { // queued, duplicate, busy
		if _, err := d.Dispatch(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if len(ops) != 0 {
		t.Fatalf("NATSError heard %v with JetStream up", ops)
	}
	env.Server.Close()
	if out, err := d.Dispatch(ctx, msg("m3", "bob")); err != nil || !out.Spooled {
		t.Fatalf("queue down: %+v %v, want spooled", out, err)
	}
	if len(ops) != 1 || ops[0] != "publish" {
		t.Fatalf("NATSError heard %v with JetStream down, want [publish]", ops)
	}
}
