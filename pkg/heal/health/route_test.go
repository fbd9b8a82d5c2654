package health_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// A group deaf on one route while direct messages still arrive, over real
// etcd, JetStream and the simulator's group_silence fault.

const group = "g1"

// seedGroupBaseline saves a baseline in which group g1 is busy (2,000
// callbacks in 10 minutes this hour of the week and the next: 2.1 s of
// silence allowed at silenceLimits) and the bot as a whole has no opinion
// yet: only the route's own baseline can find the fault.
func seedGroupBaseline(e *env) {
	b := health.Baseline{Routes: map[string]*health.RouteBaseline{}}
	rb := &health.RouteBaseline{}
	now := time.Now()
	rb.Observe(now, time.Local, 10*time.Minute, 2000)
	rb.Observe(now.Add(time.Hour), time.Local, 10*time.Minute, 2000)
	b.Routes[wecom.RouteGroupPrefix+group] = rb
	raw, _ := json.Marshal(&b)
	if _, err := e.js.Store.Health().Put(context.Background(), "baseline."+bot, raw); err != nil {
		e.t.Fatal(err)
	}
}

// groupInbound counts the group's callbacks and every other.
type groupInbound struct{ group, other *atomic.Int64 }

func (g groupInbound) HandleMessage(_ *election.Term, _ *wecom.Conn, _ string, m *wecom.MsgCallback) {
	if m.ChatType == wecom.ChatGroup && m.ChatID == group {
		g.group.Add(1)
		return
	}
	g.other.Add(1)
}

func (groupInbound) HandleEvent(*election.Term, *wecom.Conn, string, *wecom.EventCallback) {}

// routeEnv starts a node whose baseline knows g1 as busy, counting g1's
// callbacks apart, with a backfill pass counted in passes.
func routeEnv(t *testing.T, passes *atomic.Int64) (*env, *atomic.Int64) {
	var inGroup, other atomic.Int64
	e := start(t, options{before: seedGroupBaseline,
		health: func(c *health.Config) {
			silenceLimits(c)
			c.Backfill = history{pass: func(context.Context, *election.Term) (backfill.Report, error) {
				passes.Add(1)
				return backfill.Report{}, nil
			}}
		},
		node: func(c *node.Config) { c.Inbound = groupInbound{group: &inGroup, other: &other} }})
	e.waitOnline()
	e.postGroup()
	testwait.Eventually(t, waitLong, "g1's first message", func() bool { return inGroup.Load() == 1 })
	return e, &inGroup
}

func (e *env) postGroup() {
	e.t.Helper()
	if _, err := e.sim.PostMessage(wecomsim.MessageRequest{BotID: bot, UserID: "dave", ChatType: wecom.ChatGroup, ChatID: group, Text: "@bot anyone?"}); err != nil {
		e.t.Fatal(err)
	}
}

// directUntil has a user write to the bot directly until done holds: the
// bot is otherwise alive.
func (e *env) directUntil(what string, done func() bool) {
	e.t.Helper()
	testwait.Eventually(e.t, waitLong, what, func() bool {
		if _, err := e.sim.PostMessage(wecomsim.MessageRequest{BotID: bot, UserID: "carol", Text: "hello"}); err != nil {
			e.t.Fatal(err)
		}
		return done()
	})
}

// routeIncident is the bot's one outage incident if it is g1's silence.
func (e *env) routeIncident() (incident.Incident, bool) {
	all := e.incidents()
	if len(all) != 1 || all[0].Signal != incident.SignalRouteSilence {
		return incident.Incident{}, false
	}
	return all[0], true
}

// Group callbacks withheld from the connection while direct messages
// arrive: found against the group's own baseline (T1 within a minute),
// one resubscribe on a fresh connection, group messages arrive again, the
// gap is backfilled, and the incident closes by itself.
func TestSilentGroupIsResubscribedOnce(t *testing.T) {
	var passes atomic.Int64
	e, inGroup := routeEnv(t, &passes)
	conns := e.stats().Connections
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultGroupSilence})
	e.postGroup() // withheld
	e.directUntil("a route silence incident", func() bool { _, ok := e.routeIncident(); return ok })
	testwait.Eventually(t, waitLong, "a fresh connection", func() bool { return !e.stats().GroupsSilenced && e.stats().Connected })
	passesBefore := passes.Load()
	testwait.Eventually(t, waitLong, "g1's callbacks again", func() bool {
		e.postGroup()
		return inGroup.Load() > 1
	})
	i := e.waitClosed(1)
	if i.Signal != incident.SignalRouteSilence || i.Route != wecom.RouteGroupPrefix+group || i.Level != incident.Auto {
		t.Fatalf("incident, want an automatic route_silence of group:%s:\n%s", group, dump(i))
	}
	if i.T1() > time.Minute || i.FirstAction.IsZero() {
		t.Fatalf("T1 %s (want at most a minute), first action %v:\n%s", i.T1(), i.FirstAction, dump(i))
	}
	if got := e.stats().Connections - conns; got != 1 {
		t.Fatalf("%d resubscribes for one silent group, want 1:\n%s", got, dump(i))
	}
	if !strings.Contains(i.Backfill.Events, "group:g1") || !strings.Contains(i.Backfill.Events, "lost") {
		t.Fatalf("the group's events of the gap not stated lost (%q):\n%s", i.Backfill.Events, dump(i))
	}
	// The incident's own backfill runs once the group is heard again
	// (each connection's pass runs too, for no incident).
	if !i.Backfill.Ran || passes.Load() <= passesBefore {
		t.Fatalf("no backfill pass over the group's gap after its callbacks came back (passes %d, before %d):\n%s", passes.Load(), passesBefore, dump(i))
	}
}

// A group that a fresh connection does not bring back: one resubscribe,
// then a person is paged; the incident closes by itself once the group's
// callbacks arrive again.
func TestGroupStillSilentAfterResubscribePages(t *testing.T) {
	var passes atomic.Int64
	e, inGroup := routeEnv(t, &passes)
	conns := e.stats().Connections
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultGroupSilence, Seconds: 600})
	e.postGroup() // withheld
	var paged incident.Incident
	e.directUntil("the route silence paged", func() bool {
		i, ok := e.routeIncident()
		paged = i
		return ok && i.Level == incident.Human
	})
	if got := e.stats().Connections - conns; got != 1 {
		t.Fatalf("%d resubscribes before the page, want 1:\n%s", got, dump(paged))
	}
	if !strings.Contains(paged.Next, "g1") {
		t.Fatalf("paged incident's next action %q does not name the group:\n%s", paged.Next, dump(paged))
	}
	// The record is written after the incident.
	testwait.Eventually(t, waitLong, "the record needs a person", func() bool { return e.record().State == health.NeedsHuman })
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultClear})
	testwait.Eventually(t, waitLong, "g1's callbacks again", func() bool {
		e.postGroup()
		return inGroup.Load() > 1
	})
	i := e.waitClosed(1)
	if i.Method != incident.MethodHuman {
		t.Fatalf("closed as %s, want human (a person was paged):\n%s", i.Method, dump(i))
	}
	if got := e.stats().Connections - conns; got != 1 {
		t.Fatalf("%d resubscribes in all, want 1:\n%s", got, dump(i))
	}
}

// A card click sent while no node held the connection is not delivered
// later (WeCom does not send events again) and no history carries it: the
// outage's incident states the gap's events lost.
func TestEventsWhileAwayAreStatedLost(t *testing.T) {
	e := start(t, options{})
	e.waitOnline()
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultRefuseSubscribe, Seconds: 2})
	e.fault(wecomsim.FaultRequest{Action: wecomsim.FaultDrop})
	res, err := e.sim.PostEvent(wecomsim.EventRequest{BotID: bot, UserID: "alice", EventType: wecom.EventTemplateCardEvent, EventKey: "approve", TaskID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered {
		t.Fatal("the click was delivered although no connection was subscribed")
	}
	i := e.waitClosed(1)
	for _, want := range []string{"to the bot", "template_card_event", "lost"} {
		if !strings.Contains(i.Backfill.Events, want) {
			t.Fatalf("the gap's events not stated lost (%q lacks %q):\n%s", i.Backfill.Events, want, dump(i))
		}
	}
}
