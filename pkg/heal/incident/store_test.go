package incident_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/heal/incident"
)

func TestOneOpenIncidentPerBot(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	s := incident.NewStore(env.Store.Incidents())
	ctx := context.Background()
	t0 := time.Now().UTC()

	// Five nodes detect the same outage at once: one incident.
	var wg sync.WaitGroup
	ids := make(chan string, 5)
	for k := range 5 {
		wg.Go(func() {
			inc, err := s.Open(ctx, incident.Incident{Bot: "b1", Signal: incident.SignalConnection,
				Detected: t0.Add(time.Duration(k) * time.Millisecond), Dropped: t0.Add(-time.Second), Level: incident.Auto})
			if err != nil && !errors.Is(err, incident.ErrOpen) {
				t.Error(err)
				return
			}
			ids <- inc.ID
		})
	}
	wg.Wait()
	close(ids)
	var first string
	for id := range ids {
		if first == "" {
			first = id
		}
		if id != first {
			t.Fatalf("two open incidents for one bot: %s and %s", first, id)
		}
	}
	all, err := s.List(ctx, incident.Filter{Bot: "b1"})
	if err != nil || len(all) != 1 {
		t.Fatalf("List = %d incidents, %v; want 1", len(all), err)
	}
	if got := all[0].T1(); got != time.Second && got > 2*time.Second {
		t.Fatalf("T1 = %v", got)
	}

	// Another bot's incident is its own.
	other, err := s.Open(ctx, incident.Incident{Bot: "b2", Level: incident.Auto})
	if err != nil || other.ID == first {
		t.Fatalf("b2: %v %v", other, err)
	}

	// Recover, close: the next outage opens a new incident.
	now := time.Now().UTC()
	if _, err := s.Update(ctx, "b1", first, func(i *incident.Incident) error {
		i.Acted(now, "auto: reconnect")
		i.Recovered, i.DataComplete, i.Closed, i.State, i.Method = now, now, now, incident.Closed, incident.MethodAuto
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if cur, err := s.OpenFor(ctx, "b1", incident.Outage); err != nil || cur != nil {
		t.Fatalf("after close OpenFor = %v, %v", cur, err)
	}
	next, err := s.Open(ctx, incident.Incident{Bot: "b1", Level: incident.Auto, Detected: now.Add(time.Second)})
	if err != nil || next.ID == first {
		t.Fatalf("second incident: %v %v", next, err)
	}
	open, err := s.List(ctx, incident.Filter{Open: true})
	if err != nil || len(open) != 2 {
		t.Fatalf("open incidents = %d, %v; want 2 (b1's second, b2's)", len(open), err)
	}
}

func TestAckClosesDataIncidentAndCountsAsHuman(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	s := incident.NewStore(env.Store.Incidents())
	ctx := context.Background()
	inc, err := s.Open(ctx, incident.Incident{Bot: "b-1", Kind: incident.Data, Level: incident.Human,
		Signal: incident.SignalBackfill, Reason: "3 messages not filled"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Ack(ctx, inc.ID, "alice", "told the users")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != incident.Closed || got.Method != incident.MethodHuman || got.ActedBy != "human: alice" || got.T2() <= 0 {
		t.Fatalf("after ack: %+v", got)
	}
	if _, err := s.Ack(ctx, "nope", "alice", ""); !errors.Is(err, incident.ErrNotFound) {
		t.Fatalf("ack of unknown id: %v", err)
	}
}

// An outage and a data incident of one bot detected in the same
// millisecond are two incidents (their ids were the same, and the second
// Open failed with "key exists").
func TestOutageAndDataIncidentAtOneInstant(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	s := incident.NewStore(env.Store.Incidents())
	ctx := context.Background()
	at := time.Now().UTC()
	out, err := s.Open(ctx, incident.Incident{Bot: "b1", Level: incident.Auto, Detected: at})
	if err != nil {
		t.Fatal(err)
	}
	data, err := s.Open(ctx, incident.Incident{Bot: "b1", Kind: incident.Data, Level: incident.Human, Signal: incident.SignalBackfill, Detected: at})
	if err != nil || data.ID == out.ID {
		t.Fatalf("data incident at the outage's instant: %+v, %v", data, err)
	}
	if got, err := s.Ack(ctx, data.ID, "alice", ""); err != nil || got.Kind != incident.Data {
		t.Fatalf("ack of the data incident: %+v, %v", got, err)
	}
}

// A claim is won once, by one of the nodes that make it at once; given
// back, it can be won again; it lists as no incident.
func TestClaimOnce(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	s := incident.NewStore(env.Store.Incidents())
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 5 {
		wg.Go(func() {
			first, err := s.Claim(ctx, "b1", "corrupt_record/t_1")
			if err != nil {
				t.Error(err)
			}
			if first {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("claim won %d times, want once", won)
	}
	if first, err := s.Claim(ctx, "b1", "corrupt_record/t_2"); err != nil || !first {
		t.Fatalf("another claim: %v %v", first, err)
	}
	if err := s.Release(ctx, "b1", "corrupt_record/t_1"); err != nil {
		t.Fatal(err)
	}
	if first, err := s.Claim(ctx, "b1", "corrupt_record/t_1"); err != nil || !first {
		t.Fatalf("claim after its release: %v %v", first, err)
	}
	if all, err := s.List(ctx, incident.Filter{}); err != nil || len(all) != 0 {
		t.Fatalf("claims listed as incidents: %v %v", all, err)
	}
}
