package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/heal/alert"
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
)

// alerts runs an alerter over e's incidents that posts every alert to a
// JSON webhook of its own (the alert path as serve wires it, one sink),
// and returns what arrives there.
func (e *env) alerts() <-chan alert.Alert {
	e.t.Helper()
	got := make(chan alert.Alert, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a alert.Alert
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got <- a
	}))
	a, err := alert.New(e.inc, alert.Config{NodeID: "n1", Sinks: []alert.Sink{alert.NewWebhook(srv.URL)},
		Synthetic: alert.SyntheticOff, Tick: 50 * time.Millisecond, Logger: zerolog.Nop()})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done; srv.Close() })
	return got
}

// A delivery that failed for good (the pusher's Health.DeliveryFailed) opens the
// bot's data incident at level human, signal delivery, naming the task and
// the conversation, and pages a person once; a second failure adds to the
// same incident and pages nobody again.
func TestDeliveryFailedForGoodPagesAPerson(t *testing.T) {
	e := start(t, options{})
	e.waitOnline()
	sent := e.alerts()
	first := &task.Record{ID: task.ID(bot, "m1"), Bot: bot, Chat: "carol"}
	e.h.DeliveryFailed(first, errors.New("errcode 40058: invalid chat"))
	var data incident.Incident
	testwait.Eventually(t, waitLong, "a data incident", func() bool {
		all := e.dataIncidents()
		if len(all) == 0 {
			return false
		}
		data = all[0]
		return true
	})
	if data.Level != incident.Human || data.Signal != incident.SignalDelivery || data.State != incident.Open ||
		!strings.Contains(data.Reason, first.ID) || !strings.Contains(data.Reason, "carol") || !strings.Contains(data.Reason, "40058") {
		t.Fatalf("data incident:\n%s", dump(data))
	}
	var page alert.Alert
	select {
	case page = <-sent:
	case <-time.After(waitLong):
		t.Fatal("no alert for the failed delivery")
	}
	if page.Level != incident.Human || len(page.Instances) != 1 || page.Instances[0].Incident != data.ID ||
		page.Instances[0].Signal != incident.SignalDelivery || page.Instances[0].Owner != "alice" || page.NextAction == "" {
		t.Fatalf("alert %+v, want one human alert about incident %s", page, data.ID)
	}

	second := &task.Record{ID: task.ID(bot, "m2"), Bot: bot, Chat: "dave"}
	e.h.DeliveryFailed(second, errors.New("errcode 40058: invalid chat"))
	testwait.Eventually(t, waitLong, "the second failure noted in the same incident", func() bool {
		all := e.dataIncidents()
		return len(all) == 1 && strings.Contains(dump(all[0]), second.ID)
	})
	// The alerter ticks every 50 ms: a second page would come within a
	// few ticks of the incident's update.
	select {
	case a := <-sent:
		t.Fatalf("a second alert for the same incident: %+v", a)
	case <-time.After(time.Second):
	}
	all := e.dataIncidents()
	if len(all) != 1 || len(all[0].Alerts) != 1 {
		t.Fatalf("want one data incident with one alert recorded: %+v", all)
	}
}

// The status lines a stream was owed while the bot was away (one per
// push.heartbeat without a frame, from the drop to the return) were never
// sent: they are counted in the outage's incident, besides the stream
// itself. A stream closed before the outage was owed none.
func TestStatusLinesDueWhileAwayAreCounted(t *testing.T) {
	const every = 500 * time.Millisecond
	e := start(t, options{health: func(c *health.Config) { c.StatusLineEvery = every }})
	e.waitOnline()
	ctx := context.Background()
	lc := task.NewLifecycle(e.js.Store, "n1", zerolog.Nop()).Quiet()
	stream := func(chat string) string {
		r := task.New(bot, "m-"+chat, time.Now())
		r.Chat = chat
		if _, err := lc.Open(ctx, r); err != nil {
			t.Fatal(err)
		}
		if _, err := lc.Shown(ctx, r.ID, "", time.Now()); err != nil { // the receipt
			t.Fatal(err)
		}
		return r.ID
	}
	running := stream("fred")
	closed := stream("gina")
	if _, err := lc.Truncate(ctx, closed, "stream window closing"); err != nil {
		t.Fatal(err)
	}
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultRefuseSubscribe, Seconds: 3})
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultDrop})
	i := e.waitClosed(1)
	r, err := lc.Get(ctx, running)
	if err != nil {
		t.Fatal(err)
	}
	want := 0 // due at PushedAt + k·every, k ≥ 1, within [Dropped, Recovered]
	for at := r.PushedAt.Add(every); !at.After(i.Recovered); at = at.Add(every) {
		if !at.Before(i.Dropped) {
			want++
		}
	}
	t.Logf("away %s: %d status lines due", i.Recovered.Sub(i.Dropped).Round(time.Millisecond), want)
	if want < 4 { // away at least 3 s
		t.Fatalf("away %s: the test expects at least 4 status lines due, got %d:\n%s", i.Recovered.Sub(i.Dropped), want, dump(i))
	}
	if i.Replay.DroppedStatusLines != want || i.Replay.DroppedStale != 2 {
		t.Fatalf("replay %+v, want %d status lines dropped (fred's only) and 2 stale streams:\n%s", i.Replay, want, dump(i))
	}
}
