package jetstream_test

import (
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/nats-io/nats.go"
)

// closedWithin reports whether ch closes within d.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// closedNow reports whether ch is closed already.
func closedNow(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waiting waits on ch, from now on, in the background: the channel it
// returns closes once ch has.
func waiting(t *testing.T, ch <-chan struct{}) <-chan struct{} {
	heard, stop := make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case <-ch:
			close(heard)
		case <-stop:
		}
	}()
	t.Cleanup(func() { close(stop) })
	return heard
}

// reconnect makes env's connection leave its server and come back, and
// waits until it is connected again.
func reconnect(t *testing.T, env *testenv.JetStream) {
	t.Helper()
	before := env.Conn.Stats().Reconnects
	if err := env.Conn.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "reconnected", func() bool {
		return env.Conn.Status() == nats.CONNECTED && env.Conn.Stats().Reconnects > before
	})
}

// Reconnected's channel stays open while the connection stays, closes at
// its reconnect, and a fresh one, open, is handed out after it, which
// the next reconnect closes.
func TestReconnectedClosesAtEachReconnect(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	first := env.Store.Reconnected()
	if first == nil {
		t.Fatal("no channel from a store made by Declare")
	}
	if closedWithin(first, 500*time.Millisecond) {
		t.Fatal("closed with no reconnect")
	}

	reconnect(t, env)
	if !closedWithin(first, 30*time.Second) {
		t.Fatal("not closed 30 s after the reconnect")
	}
	second := env.Store.Reconnected()
	if closedWithin(second, 500*time.Millisecond) {
		t.Fatal("the channel handed out after the reconnect is closed too, with no reconnect since")
	}

	reconnect(t, env)
	if !closedWithin(second, 30*time.Second) {
		t.Fatal("the channel handed out after the first reconnect is not closed at the second")
	}
}

// A reconnect that comes while nobody waits on the channel is not missed:
// a waiter that took the channel, then worked through the reconnect, finds
// it closed when it waits. Here the worker is the pusher's pattern (take
// the next channel, then act), and the reconnect comes during its action.
func TestReconnectDuringTheWaitersWorkIsNotMissed(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	var (
		working = make(chan struct{}) // the waiter took the next channel and acts
		finish  = make(chan struct{}) // its action may end
		heard   = make(chan int, 2)   // reconnects it acted on
		stop    = make(chan struct{}) // the test is over
		ended   = make(chan struct{})
	)
	go func() {
		defer close(ended)
		back := env.Store.Reconnected()
		for n := 1; ; n++ {
			select {
			case <-stop:
				return
			case <-back:
			}
			back = env.Store.Reconnected()
			heard <- n
			if n == 1 { // its action outlasts the second reconnect
				close(working)
				select {
				case <-stop:
					return
				case <-finish:
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-ended })

	reconnect(t, env)
	select {
	case <-working:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not hear the first reconnect within 30 s")
	}
	// The second, while the waiter acts: it waits on nothing. Another
	// waiter, waiting, says when the store has heard of it.
	watcher := waiting(t, env.Store.Reconnected())
	reconnect(t, env)
	if !closedWithin(watcher, 30*time.Second) {
		t.Fatal("a waiting waiter did not hear the second reconnect within 30 s")
	}
	close(finish)
	select {
	case n := <-heard:
		if n != 1 {
			t.Fatalf("heard reconnect %d first", n)
		}
	default:
		t.Fatal("the first reconnect was not counted")
	}
	select {
	case <-heard:
	case <-time.After(30 * time.Second):
		t.Fatal("the reconnect that came during the waiter's action was missed")
	}
}

// The same for the simplest waiter: it takes the channel, works (a
// reconnect comes and goes meanwhile), and only then looks: closed.
func TestReconnectedStaysClosed(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	taken := env.Store.Reconnected()
	watcher := waiting(t, env.Store.Reconnected())
	reconnect(t, env)
	if !closedWithin(watcher, 30*time.Second) {
		t.Fatal("a waiting waiter did not hear the reconnect within 30 s")
	}
	if !closedNow(taken) {
		t.Fatal("the channel taken before the reconnect, not waited on during it, is still open after it")
	}
}
