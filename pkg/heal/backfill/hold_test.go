package backfill_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
)

// termsRig is what the tests of a deferral outliving its term share: a
// real JetStream store, the WeCom simulator with bot b1 and its history,
// and the inbound watermark's tracker (node n1) flushing every 20 ms,
// each stopped when the test ends.
type termsRig struct {
	env *testenv.JetStream
	sim *wecomsim.Server
	src *backfill.SimHistory
	tr  *backfill.Tracker
	t   *testing.T
}

func newTermsRig(t *testing.T) *termsRig {
	t.Helper()
	env := testenv.StartJetStream(t, jetstream.Options{})
	sim, src := simHistory(t)
	tr := &backfill.Tracker{Store: env.Store, Node: "n1", Logger: zerolog.Nop()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tr.Run(ctx, 20*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })
	return &termsRig{env: env, sim: sim, src: src, tr: tr, t: t}
}

// watermark is b1's inbound watermark as stored.
func (r *termsRig) watermark() time.Time {
	wm, err := backfill.LoadWatermark(context.Background(), r.env.Store, "b1")
	if err != nil {
		r.t.Fatal(err)
	}
	return wm.Created
}

// A message WeCom took while no node held the connection, found by a
// term's pass but deferred (its conversation busy), is answered by the
// next term's pass when the first term ends before handing it over, even
// though that term's connection delivered later messages meanwhile (the
// chaos run's kill-worker-last-delivery r3: the watermark moved past the
// deferred messages, and the next leader's pass started after them).
func TestDeferredMissedMessageSurvivesTheTermsEnd(t *testing.T) {
	r := newTermsRig(t)
	env, sim, src, tr, watermark := r.env, r.sim, r.src, r.tr, r.watermark

	// Before the gap: the last message handled 10 s ago.
	before := time.Now().Add(-10 * time.Second).Truncate(time.Second)
	tr.Handled("b1", before)
	testwait.Eventually(t, 30*time.Second, "the watermark before the gap", func() bool { return watermark().Equal(before) })
	// The gap: u1 asks while no node holds the connection.
	gap, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "u1", Text: "asked in the gap"})
	if err != nil {
		t.Fatal(err)
	}

	// Term 1 (node n1): its pass finds the message, u1 is busy: deferred.
	opts := backfill.Options{Source: src, Overlap: 2 * time.Second, Logger: zerolog.Nop()}
	first := backfill.New(opts)
	in1 := &termInbound{busy: "u1"}
	first.Bind(env.Store, in1, tr)
	termCtx, endTerm := context.WithCancel(context.Background())
	passed := make(chan error, 1)
	go func() {
		_, err := first.Pass(termCtx, &election.Term{Bot: "b1", Node: "n1", Rev: 1})
		passed <- err
	}()
	testwait.Eventually(t, 30*time.Second, "term 1's pass deferring u1's message", func() bool { return in1.deferrals() > 0 })
	// Term 1's connection delivers later messages meanwhile, handled to
	// the end: a minute past the gap, more than the overlap.
	tr.Handled("b1", time.Now().Add(time.Minute))
	time.Sleep(300 * time.Millisecond) // many flush rounds
	// Term 1 ends (its node killed, a takeover) before u1 is free.
	endTerm()
	if err := <-passed; !errors.Is(err, context.Canceled) {
		t.Fatalf("term 1's pass: %v, want its term's end", err)
	}
	time.Sleep(300 * time.Millisecond) // flush rounds after the term
	if wm := watermark(); !wm.Equal(before) {
		t.Errorf("watermark after term 1 = %s, want it held before the deferred message (%s)", wm, before)
	}

	// Term 2 (node n2): u1 is free; its pass answers the message.
	second := backfill.New(opts)
	in2 := &termInbound{}
	second.Bind(env.Store, in2, nil)
	rep, err := second.Pass(context.Background(), &election.Term{Bot: "b1", Node: "n2", Rev: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := in2.handedOver(); rep.Filled != 1 || len(got) != 1 || got[0] != gap.MsgID {
		t.Fatalf("term 2's pass: %+v, handed over %q; want the gap's message %s", rep, got, gap.MsgID)
	}

	// A pass that finishes releases the watermark: what was handled
	// meanwhile is written.
	third := backfill.New(opts)
	third.Bind(env.Store, &termInbound{known: map[string]bool{gap.MsgID: true}}, tr)
	later := time.Now().Add(2 * time.Minute).Truncate(time.Second)
	tr.Handled("b1", later)
	if _, err := third.Pass(context.Background(), &election.Term{Bot: "b1", Node: "n1", Rev: 3}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "the watermark after a finished pass", func() bool { return watermark().Equal(later) })
}

// termInbound is one leader's inbound path: a message of the busy
// conversation is deferred, any other not known is handed over.
type termInbound struct {
	busy  string
	known map[string]bool

	mu       sync.Mutex
	late     []string // msgids handed over
	deferred int
}

func (in *termInbound) Known(_ context.Context, _, msgid string) (bool, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.known[msgid], nil
}

func (in *termInbound) Late(_ context.Context, _ string, m backfill.Message) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if m.Chat == in.busy {
		in.deferred++
		return backfill.ErrBusy
	}
	in.late = append(in.late, m.MsgID)
	return nil
}

func (in *termInbound) deferrals() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.deferred
}

func (in *termInbound) handedOver() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.late...)
}

// The history audit's own deferred messages survive the term's end too:
// the audit reads behind the live traffic, so the watermark is already
// past a missed message it finds; while the message waits for its busy
// conversation the watermark is held and lowered to it, and the next
// term's pass answers it. Before, the next pass started after it.
func TestAuditDeferredMessageSurvivesTheTermsEnd(t *testing.T) {
	r := newTermsRig(t)
	env, sim, src, tr, watermark := r.env, r.sim, r.src, r.tr, r.watermark

	// A message no connection got (a deaf connection, no incident), and
	// the live traffic handled well past it.
	missed, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "u1", Text: "never delivered"})
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now().Truncate(time.Second)
	ahead := time.Now().Add(time.Minute).Truncate(time.Second)
	tr.Handled("b1", ahead)
	testwait.Eventually(t, 30*time.Second, "the watermark past the missed message", func() bool { return watermark().Equal(ahead) })

	// Term 1's audit finds it (once it is auditLag old), u1 busy: deferred.
	opts := backfill.Options{Source: src, Overlap: 2 * time.Second, AuditEvery: 200 * time.Millisecond, Logger: zerolog.Nop()}
	first := backfill.New(opts)
	in1 := &termInbound{busy: "u1"}
	first.Bind(env.Store, in1, tr)
	termCtx, endTerm := context.WithCancel(context.Background())
	audited := make(chan struct{})
	go func() { defer close(audited); first.Audit(termCtx, &election.Term{Bot: "b1", Node: "n1", Rev: 1}) }()
	testwait.Eventually(t, time.Minute, "term 1's audit deferring u1's message", func() bool { return in1.deferrals() > 0 })
	testwait.Eventually(t, 30*time.Second, "the watermark lowered to the deferred message", func() bool { return watermark().Before(sent) })
	tr.Handled("b1", ahead.Add(time.Minute)) // more live traffic: held
	time.Sleep(300 * time.Millisecond)       // many flush rounds
	endTerm()
	<-audited
	time.Sleep(300 * time.Millisecond)
	if wm := watermark(); !wm.Before(sent) {
		t.Fatalf("watermark after term 1 = %s, want before the deferred message (%s)", wm, sent)
	}

	// Term 2: u1 is free; its pass answers the message.
	second := backfill.New(opts)
	in2 := &termInbound{}
	second.Bind(env.Store, in2, nil)
	rep, err := second.Pass(context.Background(), &election.Term{Bot: "b1", Node: "n2", Rev: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := in2.handedOver(); rep.Filled != 1 || len(got) != 1 || got[0] != missed.MsgID {
		t.Fatalf("term 2's pass: %+v, handed over %q; want the missed message %s", rep, got, missed.MsgID)
	}
}
