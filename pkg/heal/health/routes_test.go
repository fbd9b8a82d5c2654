package health

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/wecom"
)

// Route silence's decisions, one synchronous step each (decide.go):
// a group silent past its own baseline while the bot's other chats still
// deliver is judged; the judgment resubscribes once, then pages.

const g1, g2 = wecom.RouteGroupPrefix + "g1", wecom.RouteGroupPrefix + "g2"

// busyRoutes is a baseline whose routes are as busy as busy()'s bot:
// each allows the floor, 2 s, of silence at t0's hour.
func busyRoutes(routes ...string) Baseline {
	b := Baseline{Routes: map[string]*RouteBaseline{}}
	for _, r := range routes {
		rb := &RouteBaseline{}
		rb.Observe(t0, time.UTC, 10*time.Minute, 60000)
		b.Routes[r] = rb
	}
	return b
}

func TestDecideRouteSilence(t *testing.T) {
	heard := func(n int64, last time.Duration) wecom.RouteVitals {
		return wecom.RouteVitals{Callbacks: n, LastCallback: at(last)}
	}
	cases := []struct {
		name     string
		now      time.Time
		baseline Baseline
		watch    func(*watch)
		sight    func(*sight)
		want     string // the route judged; "": none
		heardAt  time.Time
	}{
		{name: "a busy group silent past its baseline while direct messages arrive: judged",
			now: at(10 * time.Second), baseline: busyRoutes(g1),
			sight: func(s *sight) {
				s.routes = map[string]wecom.RouteVitals{g1: heard(5, time.Second), wecom.RouteDirect: heard(9, 9*time.Second)}
				s.v.Callbacks, s.v.LastCallback = 14, at(9*time.Second)
			},
			want: g1, heardAt: at(time.Second)},
		{name: "a group not heard on this connection: silent since the subscribe",
			now: at(10 * time.Second), baseline: busyRoutes(g1),
			sight: func(s *sight) {
				s.routes = map[string]wecom.RouteVitals{wecom.RouteDirect: heard(9, 9*time.Second)}
				s.v.Callbacks, s.v.LastCallback = 9, at(9*time.Second)
			},
			want: g1, heardAt: t0},
		{name: "the group's last callback is the bot's last: the bot's silence, not a route's",
			now: at(10 * time.Second), baseline: busyRoutes(g1),
			sight: func(s *sight) {
				s.routes = map[string]wecom.RouteVitals{g1: heard(5, 7*time.Second)}
				s.v.Callbacks, s.v.LastCallback = 5, at(7*time.Second)
			}},
		{name: "the other chats delivered, but longer ago than the group's threshold: not judged",
			now: at(10 * time.Second), baseline: busyRoutes(g1),
			sight: func(s *sight) {
				s.routes = map[string]wecom.RouteVitals{g1: heard(5, time.Second), wecom.RouteDirect: heard(1, 3*time.Second)}
				s.v.Callbacks, s.v.LastCallback = 6, at(3*time.Second)
			}},
		{name: "a group that spoke within its threshold: not judged",
			now: at(10 * time.Second), baseline: busyRoutes(g1),
			sight: func(s *sight) {
				s.routes = map[string]wecom.RouteVitals{g1: heard(5, 8500*ms), wecom.RouteDirect: heard(9, 9*time.Second)}
				s.v.Callbacks, s.v.LastCallback = 14, at(9*time.Second)
			}},
		{name: "a group whose baseline has no opinion: not judged",
			now: at(10 * time.Second), baseline: Baseline{Routes: map[string]*RouteBaseline{g1: {}}},
			sight: func(s *sight) {
				s.routes = map[string]wecom.RouteVitals{g1: heard(5, time.Second), wecom.RouteDirect: heard(9, 9*time.Second)}
				s.v.Callbacks, s.v.LastCallback = 14, at(9*time.Second)
			}},
		{name: "direct silent while a group speaks: only groups are judged as routes",
			now: at(10 * time.Second), baseline: busyRoutes(wecom.RouteDirect),
			sight: func(s *sight) {
				s.routes = map[string]wecom.RouteVitals{g1: heard(9, 9*time.Second), wecom.RouteDirect: heard(1, time.Second)}
				s.v.Callbacks, s.v.LastCallback = 10, at(9*time.Second)
			}},
		{name: "a judged silence: not again before its refutation ends",
			now: at(10 * time.Second), baseline: busyRoutes(g1),
			watch: func(w *watch) { w.routeRefuted[g1] = at(11 * time.Second) },
			sight: func(s *sight) {
				s.routes = map[string]wecom.RouteVitals{wecom.RouteDirect: heard(9, 9*time.Second)}
				s.v.Callbacks, s.v.LastCallback = 9, at(9*time.Second)
			}},
		{name: "a judged silence whose group spoke since: judged again at once",
			now: at(10 * time.Second), baseline: busyRoutes(g1),
			watch: func(w *watch) { w.routeRefuted[g1], w.seenRoutes[g1] = at(time.Hour), 4 },
			sight: func(s *sight) {
				s.routes = map[string]wecom.RouteVitals{g1: heard(5, time.Second), wecom.RouteDirect: heard(9, 9*time.Second)}
				s.v.Callbacks, s.v.LastCallback = 14, at(9*time.Second)
			},
			want: g1, heardAt: at(time.Second)},
		{name: "the longest silent of two groups",
			now: at(10 * time.Second), baseline: busyRoutes(g1, g2),
			sight: func(s *sight) {
				s.routes = map[string]wecom.RouteVitals{g1: heard(5, 3*time.Second), g2: heard(5, 2*time.Second), wecom.RouteDirect: heard(9, 9*time.Second)}
				s.v.Callbacks, s.v.LastCallback = 19, at(9*time.Second)
			},
			want: g2, heardAt: at(2 * time.Second)},
		{name: "the bot's own silence waits for callbacks: no route judged",
			now: at(10 * time.Second), baseline: busyRoutes(g1),
			sight: func(s *sight) {
				s.silent = true
				s.v.LastCallback = at(9 * time.Second)
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWatch(rules, t0)
			if c.watch != nil {
				c.watch(w)
			}
			s := sight{v: fresh(), baseline: c.baseline, bound: true, loaded: true}
			if c.sight != nil {
				c.sight(&s)
			}
			p := w.decide(c.now, s)
			if p.probe != nil {
				t.Fatalf("probe %+v, want none (the connection delivers)", *p.probe)
			}
			if c.want == "" {
				if p.route != nil {
					t.Fatalf("route judged: %+v, want none", *p.route)
				}
				return
			}
			if p.route == nil {
				t.Fatalf("no route judged, want %s", c.want)
			}
			r := *p.route
			if r.signal != incident.SignalRouteSilence || r.route != c.want || !r.heardAt.Equal(c.heardAt) || r.threshold != 2*time.Second || !strings.Contains(r.reason, c.want) {
				t.Fatalf("judged %+v, want %s silent since %v allowing 2s", r, c.want, c.heardAt)
			}
		})
	}
}

// T1: a group that speaks once every 5 s (a threshold of 35 s at Factor 7)
// stops while direct messages keep arriving: ticks of a second find it
// within a minute of its last callback.
func TestRouteSilenceFoundWithinAMinute(t *testing.T) {
	w := newWatch(rules, t0)
	var b Baseline
	rb := &RouteBaseline{}
	rb.Observe(t0, time.UTC, 10*time.Minute, 120)
	b.Routes = map[string]*RouteBaseline{g1: rb}
	s := sight{v: fresh(), baseline: b, routes: map[string]wecom.RouteVitals{}}
	last := at(3 * time.Second) // the group's last callback
	s.routes[g1] = wecom.RouteVitals{Callbacks: 1, LastCallback: last}
	for tick := 4 * time.Second; tick < 2*time.Minute; tick += time.Second {
		now := at(tick)
		s.routes[wecom.RouteDirect] = wecom.RouteVitals{Callbacks: int64(tick / time.Second), LastCallback: now.Add(-500 * ms)}
		s.v.Callbacks, s.v.LastCallback = int64(tick/time.Second)+1, now.Add(-500*ms)
		if p := w.decide(now, s); p.route != nil {
			if t1 := now.Sub(last); t1 > time.Minute || t1 < 35*time.Second {
				t.Fatalf("found after %s of silence, want between its threshold (35s) and a minute", t1)
			}
			return
		}
	}
	t.Fatal("a group silent for two minutes was never judged")
}

// A silent route waits for its own callbacks: others' do not end it, and
// its silence is not learnt meanwhile.
func TestRouteHeard(t *testing.T) {
	w := newWatch(rules, t0)
	s := sight{v: fresh(), silentRoute: g1, routes: map[string]wecom.RouteVitals{wecom.RouteDirect: {Callbacks: 3, LastCallback: at(500 * ms)}}}
	s.v.Callbacks, s.v.LastCallback = 3, at(500*ms)
	p := w.decide(at(time.Second), s)
	if p.heard || p.learn == nil || p.learn.skip != g1 || p.learn.routes[wecom.RouteDirect] != 3 {
		t.Fatalf("direct callbacks while g1 waits: heard %v, learn %+v; want not heard, direct learnt, g1 skipped", p.heard, p.learn)
	}
	s.routes[g1] = wecom.RouteVitals{Callbacks: 1, LastCallback: at(1500 * ms)}
	p = w.decide(at(2*time.Second), s)
	if !p.heard || p.learn.skip != "" || p.learn.routes[g1] != 1 {
		t.Fatalf("g1's callback: heard %v, learn %+v; want heard and learnt", p.heard, p.learn)
	}
}

func TestJudgeRouteSilence(t *testing.T) {
	cases := []struct {
		missed int
		err    error
		want   silenceVerdict
	}{
		{missed: 2, want: deaf},
		{missed: 0, want: quiet},
		{err: errors.New("history: 503"), want: unknown},
		{err: ErrNoHistory, want: deaf},
		{err: fmt.Errorf("no source: %w", ErrNoHistory), want: deaf},
	}
	for _, c := range cases {
		if got, why := judgeRouteSilence(c.missed, c.err); got != c.want || why == "" {
			t.Errorf("missed %d, err %v: %v (%q), want %v", c.missed, c.err, got, why, c.want)
		}
	}
}

// A deaf route is resubscribed once (the connection closed), then paged;
// anything but the close refutes the route for its threshold.
func TestJudgedRoute(t *testing.T) {
	sp := suspicion{signal: incident.SignalRouteSilence, route: g1, reason: "no callback from group:g1", heardAt: at(time.Second), threshold: 2 * time.Second}
	now := at(10 * time.Second)
	cases := []struct {
		name    string
		verdict silenceVerdict
		acted   bool
		check   func(t *testing.T, j routeJudgment, w *watch)
	}{
		{"deaf, not acted on: close to resubscribe, dropped at its last callback", deaf, false, func(t *testing.T, j routeJudgment, w *watch) {
			if j.close == nil || j.close.signal != incident.SignalRouteSilence || j.close.route != g1 || !j.close.dropped.Equal(at(time.Second)) || j.page != "" {
				t.Fatalf("%+v", j)
			}
			if !w.routeRefuted[g1].IsZero() {
				t.Fatal("refuted although closed")
			}
		}},
		{"deaf after the resubscribe: page", deaf, true, func(t *testing.T, j routeJudgment, w *watch) {
			if j.close != nil || !strings.Contains(j.page, "resubscribe") {
				t.Fatalf("%+v", j)
			}
			if !w.routeRefuted[g1].Equal(now.Add(2 * time.Second)) {
				t.Fatalf("refuted until %v", w.routeRefuted[g1])
			}
		}},
		{"quiet users: a note", quiet, false, func(t *testing.T, j routeJudgment, w *watch) {
			if j.close != nil || j.page != "" || !strings.Contains(j.note, "baseline problem") {
				t.Fatalf("%+v", j)
			}
		}},
		{"history unreadable: not judged", unknown, false, func(t *testing.T, j routeJudgment, w *watch) {
			if j.close != nil || j.page != "" || !j.unjudged || w.routeRefuted[g1].IsZero() {
				t.Fatalf("%+v", j)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWatch(rules, t0)
			c.check(t, w.judgedRoute(now, sp, c.verdict, "why", c.acted), w)
		})
	}
}

// Route baselines: every kept route learns each tick (0 events when not
// heard), a skipped one does not, new routes are admitted while there is
// room, and a full baseline gives a place only to replace a route not busy
// enough to have an opinion anywhere.
func TestApplyRoutes(t *testing.T) {
	b := busyRoutes(g1)
	l := learning{dt: time.Second, routes: map[string]int64{g2: 3}}
	l.applyRoutes(&b, at(time.Second), time.UTC, rules.Limits)
	h := hourOfWeek(t0, time.UTC)
	if got := b.Routes[g2].Hours[h]; got.Events != 3 || got.Watched != 1 {
		t.Fatalf("g2 admitted with %+v, want 3 events in 1s", got)
	}
	if got := b.Routes[g1].Hours[h]; got.Events != 60000 || got.Watched != 601 {
		t.Fatalf("g1 not heard: %+v, want a second watched without events", got)
	}
	l = learning{dt: time.Second, routes: map[string]int64{g2: 1}, skip: g1}
	l.applyRoutes(&b, at(2*time.Second), time.UTC, rules.Limits)
	if got := b.Routes[g1].Hours[h].Watched; got != 601 {
		t.Fatalf("skipped g1 learnt: watched %v", got)
	}

	full := Baseline{Routes: map[string]*RouteBaseline{}}
	for i := range MaxRoutes {
		rb := &RouteBaseline{}
		rb.Observe(t0, time.UTC, time.Minute, 100)
		full.Routes[fmt.Sprintf("group:busy%d", i)] = rb
	}
	learning{dt: time.Second, routes: map[string]int64{g1: 1}}.applyRoutes(&full, at(time.Second), time.UTC, rules.Limits)
	if full.Routes[g1] != nil || len(full.Routes) != MaxRoutes {
		t.Fatalf("a full baseline of busy routes admitted g1 (%d routes)", len(full.Routes))
	}
	full.Routes["group:busy7"].Hours[h].Events = 5 // below MinEvents: not busy enough
	learning{dt: time.Second, routes: map[string]int64{g1: 1}}.applyRoutes(&full, at(time.Second), time.UTC, rules.Limits)
	if full.Routes[g1] == nil || full.Routes["group:busy7"] != nil || len(full.Routes) != MaxRoutes {
		t.Fatalf("g1 did not replace the idle route (%d routes)", len(full.Routes))
	}
}

// What was learnt before JetStream was bound is added to the saved
// baseline, routes included; the merge shares nothing with either.
func TestMergeBaselinesRoutes(t *testing.T) {
	saved, fresh := busyRoutes(g1), busyRoutes(g1, g2)
	out := mergeBaselines(&saved, &fresh)
	h := hourOfWeek(t0, time.UTC)
	if out.Routes[g1].Hours[h].Events != 120000 || out.Routes[g2].Hours[h].Events != 60000 {
		t.Fatalf("merged routes %+v %+v", out.Routes[g1].Hours[h], out.Routes[g2].Hours[h])
	}
	if saved.Routes[g1].Hours[h].Events != 60000 {
		t.Fatal("the merge wrote into the saved baseline")
	}
}

// The user events of a gap are stated lost, of the silent route only when
// it was one route's silence; no gap, nothing stated.
func TestLostEvents(t *testing.T) {
	got := lostEvents(at(time.Second), at(2*time.Minute), "")
	for _, want := range []string{"to the bot", "template_card_event", "feedback_event", "lost", "unknown", at(time.Second).Format(time.RFC3339)} {
		if !strings.Contains(got, want) {
			t.Errorf("%q does not say %q", got, want)
		}
	}
	if got := lostEvents(at(time.Second), at(time.Minute), g1); !strings.Contains(got, "in "+g1) {
		t.Errorf("a route's gap: %q does not name it", got)
	}
	if got := lostEvents(time.Time{}, at(time.Minute), ""); got != "" {
		t.Errorf("no drop time: %q, want nothing", got)
	}
	if got := lostEvents(at(time.Minute), at(time.Minute), ""); got != "" {
		t.Errorf("no gap: %q, want nothing", got)
	}
}
