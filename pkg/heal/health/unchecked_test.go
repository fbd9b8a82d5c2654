package health_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/heal/recovery"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// noHistory is serve's backfill pass without backfill.history_url.
func noHistory(context.Context, *election.Term) (backfill.Report, error) {
	return backfill.Report{}, health.ErrNoHistory
}

// converse writes chat's conversation context now, as a finished answer
// does.
func (e *env) converse(chat string) {
	e.t.Helper()
	if _, err := e.js.Store.Context().Put(context.Background(), jetstream.ConversationKey(bot, chat), []byte(`{"turns":[]}`)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) dataIncidents() []incident.Incident {
	var out []incident.Incident
	for _, i := range e.incidents() {
		if i.Kind == incident.Data {
			out = append(out, i)
		}
	}
	return out
}

// No history source and an outage (at least recovery.threshold): the gap
// cannot be checked, so a person is paged (one human data incident,
// signal backfill), and the conversations active just before it are
// marked "may be incomplete"; one quiet since well before the gap is not.
func TestUncheckedGapPagesAndMarks(t *testing.T) {
	e := start(t, options{health: func(c *health.Config) {
		c.Backfill = history{pass: noHistory}
		// The look-back for active conversations: carol's, written just
		// before the drop, must fall inside it on a loaded machine too,
		// and olga's, written the sleep below before hers, outside.
		c.Overlap = 3 * time.Second
		c.Recovery = recovery.Config{Threshold: time.Second, Probes: 1, ProbeInterval: 100 * time.Millisecond, Observe: 500 * time.Millisecond}
	}})
	e.waitOnline()
	e.converse("olga")
	time.Sleep(6 * time.Second) // olga's answer is older than the look-back before the gap
	e.converse("carol")
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultRefuseSubscribe, Seconds: 2})
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultDrop})
	outage := e.waitClosed(1)
	var data incident.Incident
	// Opened, then told its conversations (two writes): wait for both.
	testwait.Eventually(t, waitLong, "a data incident listing carol", func() bool {
		all := e.dataIncidents()
		if len(all) == 0 {
			return false
		}
		data = all[0]
		return len(data.Incomplete) > 0
	})
	if n := len(e.dataIncidents()); n != 1 {
		t.Fatalf("%d data incidents for one unchecked gap, want 1", n)
	}
	if data.Level != incident.Human || data.Signal != incident.SignalBackfill || !strings.Contains(data.Reason, "could not be checked") ||
		len(data.Incomplete) != 1 || data.Incomplete[0] != "carol" || !strings.Contains(data.Next, "no history source") {
		t.Fatalf("data incident:\n%s", dump(data))
	}
	if outage.Backfill.Ran || !strings.Contains(outage.Backfill.Note, "no history source") || !strings.Contains(dump(outage), "a person is paged") {
		t.Fatalf("outage incident does not say the gap was not checked:\n%s", dump(outage))
	}
	marks, err := health.Marks(context.Background(), e.js.Store.Health(), bot)
	if err != nil || len(marks) != 1 || marks[0].Chat != "carol" || !strings.Contains(marks[0].Why, "could not be checked") {
		t.Fatalf("marks = %+v, %v; want carol's alone", marks, err)
	}
	testwait.Eventually(t, waitLong, "carol's mark seen by the inbound path", func() bool {
		_, ok := e.h.TakeIncomplete(context.Background(), bot, "carol")
		return ok
	})
}

// No history source and a blip shorter than recovery.threshold (a drop
// reconnected at once): the active conversations are marked and the
// outage's incident says the gap was not checked, but nobody is paged.
func TestUncheckedBlipMarksButPagesNobody(t *testing.T) {
	e := start(t, options{health: func(c *health.Config) { c.Backfill = history{pass: noHistory} }})
	e.waitOnline()
	e.converse("carol")
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultDrop})
	e.waitClosed(1)
	testwait.Eventually(t, waitLong, "the outage's incident says the gap was not checked", func() bool {
		all := e.incidents()
		return len(all) > 0 && strings.Contains(dump(all[0]), "nobody paged")
	})
	marks, err := health.Marks(context.Background(), e.js.Store.Health(), bot)
	if err != nil || len(marks) != 1 || marks[0].Chat != "carol" {
		t.Fatalf("marks = %+v, %v; want carol's", marks, err)
	}
	if all := e.dataIncidents(); len(all) != 0 {
		t.Fatalf("a blip paged a person:\n%s", dump(all[0]))
	}
}
