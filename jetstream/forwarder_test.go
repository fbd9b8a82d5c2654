package jetstream

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// runForwarder runs f until the test ends; the cleanup stops it and waits.
func runForwarder(t *testing.T, f *Forwarder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Forwarder.Run = %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Forwarder.Run still running 30s after its context ended")
		}
	})
}

// The store-and-forward path end to end: the server stops while tasks
// arrive; publishes fail with ErrUnavailable and the tasks go to the
// spool; the server restarts on the same data dir and port; the forwarder
// drains the spool; the stream holds every msgid exactly once, in arrival
// order. The client keeps its default reconnect buffer, so publishes made
// while the server is down reach it again after the restart: the duplicate
// window, keyed by msgid, keeps them from being queued twice.
func TestForwarderSurvivesOutage(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	var kicker atomic.Pointer[Forwarder] // the forwarder needs the store, which needs the connection
	_, js := connect(t, srv, nats.ReconnectHandler(func(*nats.Conn) {
		if fw := kicker.Load(); fw != nil {
			fw.Kick() // JetStream may be back: drain now, not after the backoff
		}
	}))
	ctx := ctxT(t)
	st := declare(t, js, Options{})
	sp := openSpool(t, filepath.Join(t.TempDir(), "spool.db"))

	var (
		mu         sync.Mutex
		reported   = map[string]int{}
		duplicates int
		report     = make(chan string, 1000)
	)
	fw, err := NewForwarder(ForwarderConfig{
		Spool: sp,
		Publish: st.SpoolPublisher(func(e SpoolEntry, res PublishResult, err error) {
			if err != nil {
				t.Errorf("forwarded %s: %v (no conversation is busy in this test)", e.MsgID, err)
			}
			mu.Lock()
			reported[e.MsgID]++
			if res.Duplicate {
				duplicates++
			}
			mu.Unlock()
			report <- e.MsgID
		}),
		MinBackoff: 20 * time.Millisecond,
		MaxBackoff: 500 * time.Millisecond,
		Logger:     testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	kicker.Store(fw)
	runForwarder(t, fw)

	const n, stopAt, downFrom, restartAt = 60, 15, 30, 40
	var (
		spooled                      []string
		atStop, atRestart            = make(chan struct{}), make(chan struct{})
		stopped, restarted, produced = make(chan struct{}), make(chan struct{}), make(chan struct{})
	)
	// dispatch is the leader's inbound path: publish, or spool while
	// JetStream is unavailable, and keep spooling while the spool is not
	// empty so that no task overtakes an earlier one.
	dispatch := func(i int) error {
		e := entry(i)
		e.Received = time.Now()
		if l, err := sp.Len(); err != nil {
			return err
		} else if l == 0 {
			pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err := st.PublishTask(pctx, e.Bot, e.Conversation, e.MsgID, e.Payload)
			cancel()
			if err == nil {
				return nil
			}
			if !errors.Is(err, ErrUnavailable) {
				return fmt.Errorf("task %d: %w", i, err)
			}
		}
		if err := sp.Append(e); err != nil {
			return err
		}
		spooled = append(spooled, e.MsgID)
		fw.Kick()
		return nil
	}
	var produceErr error
	go func() {
		defer close(produced)
		for i := 0; i < n; i++ {
			switch i {
			case stopAt:
				close(atStop) // the server stops while we go on
			case downFrom:
				<-stopped // from here on the server is surely down
			case restartAt:
				close(atRestart) // the server restarts while we go on
			}
			if err := dispatch(i); err != nil {
				produceErr = err
				return
			}
			time.Sleep(2 * time.Millisecond) // traffic, not settling
		}
	}()

	<-atStop
	srv.stop()
	close(stopped)
	<-atRestart
	srv.start()
	close(restarted)
	select {
	case <-produced:
	case <-time.After(2 * time.Minute):
		t.Fatal("producer not done after 2m")
	}
	if produceErr != nil {
		t.Fatal(produceErr)
	}
	if len(spooled) < restartAt-downFrom {
		t.Fatalf("only %d tasks were spooled, want at least %d", len(spooled), restartAt-downFrom)
	}
	t.Logf("spooled %d of %d tasks: %v", len(spooled), n, spooled)

	// Wait for the forwarder to report every spooled task.
	want := map[string]bool{}
	for _, id := range spooled {
		want[id] = true
	}
	deadline := time.After(2 * time.Minute)
	for len(want) > 0 {
		select {
		case id := <-report:
			delete(want, id)
		case <-deadline:
			t.Fatalf("after 2m, spooled tasks not forwarded: %v", want)
		}
	}
	// The last entry is deleted just after it is reported.
	testwait.Eventually(t, 30*time.Second, "an empty spool", func() bool { return spoolLen(t, sp) == 0 })

	// Back to normal: with the spool empty, tasks go straight to JetStream.
	before := len(spooled)
	for i := n; i < n+5; i++ {
		if err := dispatch(i); err != nil {
			t.Fatal(err)
		}
	}
	if len(spooled) != before {
		t.Fatalf("%d tasks spooled after the outage, want 0", len(spooled)-before)
	}
	mu.Lock()
	t.Logf("%d forwarded tasks were already stored (publishes resent by the client's reconnect buffer)", duplicates)
	mu.Unlock()

	// Every msgid in the stream exactly once, in arrival order.
	info, err := st.TaskStream().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n+5 {
		t.Errorf("task stream holds %d tasks, want %d", info.State.Msgs, n+5)
	}
	var got []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.TaskStream().GetMsg(ctx, seq)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Header.Get(natsjs.MsgIDHeader))
	}
	if len(got) != n+5 {
		t.Fatalf("read %d tasks, want %d: %v", len(got), n+5, got)
	}
	for i := 0; i < n+5; i++ {
		if i >= len(got) || got[i] != entry(i).MsgID {
			t.Fatalf("stream order differs at %d:\n got %v", i, got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, c := range reported {
		if c != 1 {
			t.Errorf("%s reported %d times", id, c)
		}
	}
}

func TestForwarderStopsWhileFailing(t *testing.T) {
	leakCheck(t)
	sp := openSpool(t, filepath.Join(t.TempDir(), "spool.db"))
	if err := sp.Append(entry(0)); err != nil {
		t.Fatal(err)
	}
	tries := make(chan struct{}, 100)
	fw, err := NewForwarder(ForwarderConfig{
		Spool: sp,
		Publish: PublishFunc(func(ctx context.Context, e SpoolEntry) error {
			tries <- struct{}{}
			return ErrUnavailable
		}),
		MinBackoff: time.Millisecond,
		MaxBackoff: time.Hour, // Run must not wait out a backoff to stop
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fw.Run(ctx) }()
	for i := 0; i < 3; i++ { // failing, backing off, retrying
		select {
		case <-tries:
		case <-time.After(30 * time.Second):
			t.Fatal("forwarder did not retry")
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if l := spoolLen(t, sp); l != 1 {
		t.Fatalf("Len = %d, want 1", l)
	}
}

func TestForwarderKick(t *testing.T) {
	leakCheck(t)
	sp := openSpool(t, filepath.Join(t.TempDir(), "spool.db"))
	got := make(chan string, 10)
	fw, err := NewForwarder(ForwarderConfig{
		Spool:   sp,
		Publish: PublishFunc(func(ctx context.Context, e SpoolEntry) error { got <- e.MsgID; return nil }),
		Poll:    time.Hour, // only Kick can wake it
	})
	if err != nil {
		t.Fatal(err)
	}
	runForwarder(t, fw)
	for i := 0; i < 3; i++ {
		if err := sp.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
		fw.Kick()
		select {
		case id := <-got:
			if id != entry(i).MsgID {
				t.Fatalf("forwarded %s, want %s", id, entry(i).MsgID)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("entry %d not forwarded after Kick", i)
		}
	}
}

func TestNewForwarderChecksConfig(t *testing.T) {
	sp := openSpool(t, filepath.Join(t.TempDir(), "spool.db"))
	pub := PublishFunc(func(context.Context, SpoolEntry) error { return nil })
	for _, cfg := range []ForwarderConfig{
		{Publish: pub},
		{Spool: sp},
		{Spool: sp, Publish: pub, MinBackoff: time.Second, MaxBackoff: time.Millisecond},
		{Spool: sp, Publish: pub, Poll: -1},
	} {
		if _, err := NewForwarder(cfg); err == nil {
			t.Errorf("NewForwarder(%+v) succeeded", cfg)
		}
	}
}
