package backfill

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
)

// busyInbound is an inbound path whose conversations are busy until a
// time (by the bubble's clock), and which knows what it took.
type busyInbound struct {
	mu        sync.Mutex
	busyUntil map[string]time.Time // chat → free from then
	known     map[string]bool
	taken     []string
	at        []time.Time
}

func (in *busyInbound) Known(_ context.Context, _, msgid string) (bool, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.known[msgid], nil
}

func (in *busyInbound) Late(_ context.Context, _ string, m Message) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if time.Now().Before(in.busyUntil[m.Chat]) {
		return ErrBusy
	}
	in.known[m.MsgID] = true
	in.taken = append(in.taken, m.MsgID)
	in.at = append(in.at, time.Now())
	return nil
}

// The deferred messages of a pass are handed over again every
// deferredRetry between two reads of the history: each is taken within
// deferredRetry of its conversation becoming free (a user asking again
// every few seconds leaves it free only that long), one answered
// meanwhile (known) is not handed over, and the retries end after
// within, leaving the rest to the next read.
func TestDeferredMessagesTakenSoonAfterTheirConversationIsFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		in := &busyInbound{known: map[string]bool{}, busyUntil: map[string]time.Time{
			"alice": t0.Add(5 * time.Second),
			"bob":   t0.Add(9 * time.Second),
			"carol": t0.Add(time.Hour),
		}}
		rep := Report{later: []Message{
			{MsgID: "m-alice", Chat: "alice", Text: "a"},
			{MsgID: "m-bob", Chat: "bob", Text: "b"},
			{MsgID: "m-dave", Chat: "dave", Text: "d"}, // answered meanwhile
			{MsgID: "m-carol", Chat: "carol", Text: "c"},
		}, Deferred: 4}
		in.known["m-dave"] = true
		in.busyUntil["dave"] = t0.Add(time.Hour)
		cfg := Config{Inbound: in, Logger: zerolog.Nop()}
		filled := retryDeferred(context.Background(), cfg, "b1", rep, 15*time.Second)
		if filled != 2 || len(in.taken) != 2 || in.taken[0] != "m-alice" || in.taken[1] != "m-bob" {
			t.Fatalf("filled %d, taken %q; want alice's and bob's", filled, in.taken)
		}
		if d := in.at[0].Sub(t0); d < 5*time.Second || d > 5*time.Second+deferredRetry {
			t.Fatalf("alice's taken %s after the start, her conversation free at 5s", d)
		}
		if d := in.at[1].Sub(t0); d < 9*time.Second || d > 9*time.Second+deferredRetry {
			t.Fatalf("bob's taken %s after the start, his conversation free at 9s", d)
		}
		if took := time.Since(t0); took != 15*time.Second {
			t.Fatalf("retried for %s with carol's still busy, want the whole 15s", took)
		}
		// Nothing deferred: back at once.
		t1 := time.Now()
		if n := retryDeferred(context.Background(), cfg, "b1", Report{}, 15*time.Second); n != 0 || time.Since(t1) != 0 {
			t.Fatalf("nothing deferred: filled %d after %s", n, time.Since(t1))
		}
		// An ended context ends the retries.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if n := retryDeferred(ctx, cfg, "b1", Report{later: []Message{{MsgID: "m-carol", Chat: "carol"}}}, time.Minute); n != 0 || time.Since(t1) != 0 {
			t.Fatalf("ended context: filled %d after %s", n, time.Since(t1))
		}
	})
}
