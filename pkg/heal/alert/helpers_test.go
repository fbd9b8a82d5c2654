package alert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait for an event: generous, for a loaded 2-core box.
const wait = 30 * time.Second

// ruleClock is the injected time of the rules.
type ruleClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *ruleClock { return &ruleClock{t: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)} }

func (c *ruleClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *ruleClock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

func (c *ruleClock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// receiver is a JSON webhook endpoint: every alert posted arrives on ch.
type receiver struct {
	srv  *httptest.Server
	ch   chan Alert
	hits atomic.Int64
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{ch: make(chan Alert, 1000)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.hits.Add(1)
		var a Alert
		if err := json.NewDecoder(req.Body).Decode(&a); err != nil {
			t.Errorf("receiver: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.ch <- a
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) next(t *testing.T) Alert {
	t.Helper()
	select {
	case a := <-r.ch:
		return a
	case <-time.After(wait):
		t.Fatalf("no alert within %s", wait)
		return Alert{}
	}
}

// expect takes the next alert and checks its kind and level.
func (r *receiver) expect(t *testing.T, kind Kind, level incident.Level) Alert {
	t.Helper()
	a := r.next(t)
	if a.Kind != kind || a.Level != level {
		t.Fatalf("alert %s: kind %s level %s, want %s %s (%s)", a.ID, a.Kind, a.Level, kind, level, a.Summary)
	}
	return a
}

// fixture is one JetStream, an incident store, a clock and a receiver.
type fixture struct {
	env   *testenv.JetStream
	store *incident.Store
	clock *ruleClock
	rcv   *receiver
	n     int // barrier count
}

func newFixture(t *testing.T) *fixture {
	env := testenv.StartJetStream(t, jetstream.Options{})
	return &fixture{env: env, store: incident.NewStore(env.Store.Incidents()), clock: newClock(), rcv: newReceiver(t)}
}

// config is a test config: fast tick, short backoff, synthetic off,
// posting to the fixture's receiver.
func (f *fixture) config(t *testing.T) Config {
	return Config{
		NodeID:    "n1",
		Sinks:     []Sink{NewWebhook(f.rcv.srv.URL)},
		Owners:    map[string]string{"b1": "alice"},
		Now:       f.clock.Now,
		Tick:      20 * time.Millisecond,
		Backoff:   10 * time.Millisecond,
		Timeout:   5 * time.Second,
		Synthetic: SyntheticOff,
		Logger:    zerolog.New(zerolog.NewTestWriter(t)).With().Timestamp().Logger(),
	}
}

// run starts a.Run; stop (also a cleanup) ends it and checks it returned nil.
func run(t *testing.T, a *Alerter) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(wait):
				t.Errorf("Run still running %s after cancel", wait)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func (f *fixture) start(t *testing.T, cfg Config) (*Alerter, func()) {
	a, err := New(f.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a, run(t, a)
}

// open records an incident of bot detected now (by the clock).
func (f *fixture) open(t *testing.T, bot, signal string, level incident.Level) *incident.Incident {
	t.Helper()
	now := f.clock.Now()
	kind := incident.Outage
	if signal == incident.SignalDelivery || signal == incident.SignalBackfill {
		kind = incident.Data
	}
	inc, err := f.store.Open(context.Background(), incident.Incident{
		Bot: bot, Signal: signal, Level: level, Kind: kind, Reason: signal + " failed",
		Dropped: now.Add(-2 * time.Second), Detected: now,
	})
	f.n++
	if err != nil {
		t.Fatalf("open incident of %s: %v", bot, err)
	}
	return inc
}

// recover marks inc recovered now; closed also closes it.
func (f *fixture) recover(t *testing.T, inc *incident.Incident, closed bool) {
	t.Helper()
	now := f.clock.Now()
	if _, err := f.store.Update(context.Background(), inc.Bot, inc.ID, func(i *incident.Incident) error {
		i.Acted(now, "auto: reconnect")
		i.Recovered, i.State = now, incident.Recovering
		if closed {
			i.DataComplete, i.Closed, i.State, i.Method = now, now, incident.Closed, incident.MethodAuto
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// barrier opens a human incident on a bot of its own and checks that its
// alert is the next one received: whatever the alerter was deciding
// before has been decided, and sent nothing (alerts reach a sink in the
// order they are raised).
func (f *fixture) barrier(t *testing.T) {
	t.Helper()
	bot := fmt.Sprintf("barrier-%d", f.n)
	f.open(t, bot, incident.SignalAuth, incident.Human)
	a := f.rcv.next(t)
	if a.Kind != KindOpen || len(a.Instances) != 1 || a.Instances[0].Bot != bot {
		t.Fatalf("got alert %s (%s: %s) before the barrier's", a.ID, a.Kind, a.Summary)
	}
}

func (f *fixture) get(t *testing.T, inc *incident.Incident) *incident.Incident {
	t.Helper()
	got, err := f.store.Get(context.Background(), inc.Bot, inc.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

var _ = errors.Is
