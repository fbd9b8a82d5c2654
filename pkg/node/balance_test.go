package node_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
	"github.com/botctl/botctl/pkg/node"
)

var balanceEpoch = time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)

// fleetOf makes n bots "b000"…, each queued as queue(i) says.
func fleetOf(n int, queue func(i int) []string) []node.BalanceBot {
	out := make([]node.BalanceBot, n)
	for i := range out {
		out[i] = node.BalanceBot{ID: fmt.Sprintf("b%03d", i), Queue: queue(i)}
	}
	return out
}

func balancing(ids ...string) []node.BalanceNode {
	var out []node.BalanceNode
	for _, id := range ids {
		out = append(out, node.BalanceNode{ID: id, Weight: 1, Balances: true})
	}
	return out
}

func input(nodes []node.BalanceNode, bots []node.BalanceBot, now time.Time) node.BalanceInput {
	return node.BalanceInput{Nodes: nodes, Bots: bots, Moves: map[string]node.BalanceMove{}, Now: now,
		Tolerance: 0.1, Cooldown: 10 * time.Minute, Settle: time.Minute}
}

func spreadOf(p node.BalancePlan, id string) node.NodeSpread {
	for _, s := range p.Spread {
		if s.Node == id {
			return s
		}
	}
	return node.NodeSpread{}
}

// inBand fails t unless every node's count after the plan is within its band.
func inBand(t *testing.T, p node.BalancePlan) {
	t.Helper()
	for _, s := range p.Spread {
		if a := p.After[s.Node]; a < s.Low || a > s.High {
			t.Fatalf("%s after the plan: %d, band %d–%d (share %.2f); plan %+v", s.Node, a, s.Low, s.High, s.Share, p)
		}
	}
}

func TestPlanBalanceTable(t *testing.T) {
	now := balanceEpoch
	abc := balancing("a", "b", "c")
	ab := balancing("a", "b")
	rot := func(i int) []string { // an even spread: a, b, c in turn lead
		q := []string{"a", "b", "c"}
		return append(q[i%3:], q[:i%3]...)
	}
	cases := []struct {
		name string
		in   node.BalanceInput
		// moves is the plan's count of moves; check looks at the rest.
		moves int
		check func(t *testing.T, p node.BalancePlan)
	}{
		{
			name: "even already: nothing moves", moves: 0,
			in: input(abc, fleetOf(9, rot), now),
			check: func(t *testing.T, p node.BalancePlan) {
				if !p.Balanced() || len(p.Notes) != 0 {
					t.Fatalf("plan %+v", p)
				}
			},
		},
		{
			// 100 bots; c was away and came back: it waits at the back of
			// every queue, and a and b lead 50 each.
			name: "a node back: 30 bots to it, each past the other standby", moves: 30,
			in: input(abc, fleetOf(100, func(i int) []string {
				if i%2 == 0 {
					return []string{"a", "b", "c"}
				}
				return []string{"b", "a", "c"}
			}), now),
			check: func(t *testing.T, p node.BalancePlan) {
				s := spreadOf(p, "c")
				if s.Leads != 0 || s.Low != 30 || s.High != 36 || s.Share < 33.33 || s.Share > 33.34 {
					t.Fatalf("c's spread %+v, want 0 leads, band 30–36", s)
				}
				if p.Balanced() {
					t.Fatal("50/50/0 called balanced")
				}
				inBand(t, p)
				for _, m := range p.Moves {
					other := map[string]string{"a": "b", "b": "a"}[m.From]
					if m.To != "c" || !reflect.DeepEqual(m.Ahead, []string{other}) || m.Ready() {
						t.Fatalf("move %+v: want to c with %s stepping back first", m, other)
					}
					if !strings.Contains(m.Reason, "c leads") || !strings.Contains(m.Reason, "below its band 30–36") {
						t.Fatalf("reason %q", m.Reason)
					}
				}
			},
		},
		{
			name: "a move whose new leader is next is taken before one that needs a step back", moves: 2,
			in: input(abc, []node.BalanceBot{
				{ID: "b1", Queue: []string{"a", "b", "c"}},
				{ID: "b2", Queue: []string{"a", "b", "c"}},
				{ID: "b3", Queue: []string{"a", "c", "b"}},
				{ID: "b4", Queue: []string{"a", "b", "c"}},
				{ID: "b5", Queue: []string{"b", "a", "c"}},
				{ID: "b6", Queue: []string{"b", "c", "a"}},
			}, now),
			check: func(t *testing.T, p node.BalancePlan) {
				// a leads 4 (share 2), b 2, c 0: a gives b3 (c next) first.
				if m := p.Moves[0]; m.Bot != "b3" || m.From != "a" || m.To != "c" || !m.Ready() {
					t.Fatalf("first move %+v, want b3 a→c ready", m)
				}
				inBand(t, p)
			},
		},
		{
			name: "small counts: 7 bots on 3 nodes may be 3/2/2", moves: 0,
			in: input(abc, fleetOf(7, rot), now),
			check: func(t *testing.T, p node.BalancePlan) {
				for _, s := range p.Spread {
					if s.Low != 2 || s.High != 3 {
						t.Fatalf("%+v: want band 2–3 for a share of 2.33", s)
					}
				}
			},
		},
		{
			name: "env gate: c may lead only the bots whose queue it is in", moves: 3,
			in: input(abc, fleetOf(6, func(i int) []string {
				if i < 3 {
					return []string{"a", "b"} // gated away from c's env
				}
				return []string{"a", "b", "c"}
			}), now),
			check: func(t *testing.T, p node.BalancePlan) {
				// shares: a, b 1.5+1 = 2.5 each; c 1. a leads 6.
				if s := spreadOf(p, "c"); s.Share != 1 || s.Low != 1 || s.High != 1 {
					t.Fatalf("c %+v", s)
				}
				for _, m := range p.Moves {
					if m.To == "c" && m.Bot < "b003" {
						t.Fatalf("move %+v of a bot c may not lead", m)
					}
				}
				inBand(t, p)
			},
		},
		{
			name: "weight: a node of weight 2 takes twice the share", moves: 6,
			in: input([]node.BalanceNode{{ID: "a", Weight: 2, Balances: true}, {ID: "b", Weight: 1, Balances: true}},
				fleetOf(9, func(i int) []string { return []string{"b", "a"} }), now),
			check: func(t *testing.T, p node.BalancePlan) {
				if s := spreadOf(p, "a"); s.Share != 6 || s.Low != 6 || s.High != 6 {
					t.Fatalf("a %+v", s)
				}
				inBand(t, p)
			},
		},
		{
			name: "a node without the balancer is neither moved from nor stepped past", moves: 0,
			in: input([]node.BalanceNode{{ID: "a", Weight: 1}, {ID: "b", Weight: 1, Balances: true}, {ID: "c", Weight: 1, Balances: true}},
				fleetOf(6, func(i int) []string {
					if i%2 == 0 {
						return []string{"a", "b", "c"}
					}
					return []string{"b", "a", "c"}
				}), now),
			check: func(t *testing.T, p node.BalancePlan) {
				if len(p.Notes) == 0 {
					t.Fatal("c under its band with no note saying why")
				}
			},
		},
		{
			name: "a dead candidate ahead of the new leader blocks the move until its key goes", moves: 0,
			in: input(balancing("a", "c"), fleetOf(4, func(i int) []string { return []string{"a", "dead", "c"} }), now),
		},
		{
			name: "in flight: a move recorded within settle counts at its destination", moves: 0,
			in: func() node.BalanceInput {
				in := input(abc, fleetOf(6, func(i int) []string {
					if i < 4 {
						return []string{"a", "c", "b"}
					}
					return []string{"b", "c", "a"}
				}), now)
				in.Moves["b000"] = node.BalanceMove{From: "a", To: "c", At: now.Add(-10 * time.Second)}
				in.Moves["b001"] = node.BalanceMove{From: "a", To: "c", At: now.Add(-20 * time.Second)}
				return in
			}(),
			check: func(t *testing.T, p node.BalancePlan) {
				if s := spreadOf(p, "c"); s.Leads != 2 {
					t.Fatalf("c %+v: the two moves in flight not counted", s)
				}
			},
		},
		{
			// The handovers away from a node are bounded by MaxMoves, or
			// a quarter of the bots it leads where that is more (30/4: 7);
			// the moves whose new leader is not yet next only step a
			// standby back this look, and are not bounded.
			name: "handovers per node per look bounded", moves: 18,
			in: func() node.BalanceInput {
				in := input(abc, fleetOf(30, func(i int) []string { return []string{"a", "c", "b"} }), now)
				in.MaxMoves = 5
				return in
			}(),
			check: func(t *testing.T, p node.BalancePlan) {
				ready := 0
				for _, m := range p.Moves {
					if m.Ready() {
						ready++
					} else if m.To != "b" || !slices.Equal(m.Ahead, []string{"c"}) {
						t.Fatalf("move %+v: want b, after c steps back", m)
					}
				}
				if ready != 7 {
					t.Fatalf("%d handovers, want 7 (a quarter of a's 30, above MaxMoves 5)", ready)
				}
			},
		},
		{
			name: "handovers per node per look: MaxMoves where a quarter is less", moves: 5,
			in: func() node.BalanceInput {
				in := input(ab, fleetOf(12, func(i int) []string { return []string{"a", "b"} }), now)
				in.MaxMoves = 5
				return in
			}(),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := node.PlanBalance(tc.in)
			if len(p.Moves) != tc.moves {
				t.Fatalf("%d moves, want %d: %+v", len(p.Moves), tc.moves, p)
			}
			if tc.check != nil {
				tc.check(t, p)
			}
			// Deterministic whatever the input's order.
			shuffled := tc.in
			shuffled.Nodes = slices.Clone(tc.in.Nodes)
			shuffled.Bots = slices.Clone(tc.in.Bots)
			r := rand.New(rand.NewPCG(1, 2))
			r.Shuffle(len(shuffled.Nodes), func(i, j int) { shuffled.Nodes[i], shuffled.Nodes[j] = shuffled.Nodes[j], shuffled.Nodes[i] })
			r.Shuffle(len(shuffled.Bots), func(i, j int) { shuffled.Bots[i], shuffled.Bots[j] = shuffled.Bots[j], shuffled.Bots[i] })
			if q := node.PlanBalance(shuffled); !reflect.DeepEqual(p, q) {
				t.Fatalf("plan depends on the input's order:\n%+v\n%+v", p, q)
			}
		})
	}
}

// The cooldown: a bot the balancer moved is not moved again for 10
// minutes, counted on the clock; then it may be.
func TestPlanBalanceCooldown(t *testing.T) {
	clk := fakeclock.New(balanceEpoch)
	bots := fleetOf(4, func(i int) []string { return []string{"a", "c", "b"} })
	moves := map[string]node.BalanceMove{}
	for _, b := range bots {
		moves[b.ID] = node.BalanceMove{From: "c", To: "a", At: clk.Now()}
	}
	plan := func() node.BalancePlan {
		in := input(balancing("a", "b", "c"), bots, clk.Now())
		in.Moves = moves
		return node.PlanBalance(in)
	}
	clk.Step(time.Minute) // past settle: the moves are done, a leads all 4
	p := plan()
	if len(p.Moves) != 0 {
		t.Fatalf("moved within the cooldown: %+v", p.Moves)
	}
	if len(p.Notes) == 0 || !strings.Contains(strings.Join(p.Notes, "\n"), "may move again in 9m0s") {
		t.Fatalf("notes %q: want the cooldown's end", p.Notes)
	}
	clk.Step(9*time.Minute - time.Second)
	if p := plan(); len(p.Moves) != 0 {
		t.Fatalf("moved a second before the cooldown's end: %+v", p.Moves)
	}
	clk.Step(time.Second)
	if p := plan(); len(p.Moves) == 0 {
		t.Fatal("nothing moves once the cooldown is over")
	}
}

// queueSim plays the cluster's side of plans, as the nodes do: each
// round every Ahead node steps back (joins the queue again at its back)
// and every ready move hands over (the leader resigns and joins at the
// back, the next in queue leads), recorded as a move.
type queueSim struct {
	queues map[string][]string
	moves  map[string]node.BalanceMove
	log    map[string][]time.Time // every move of each bot, by the balancer or not
}

func (s *queueSim) bots() []node.BalanceBot {
	var out []node.BalanceBot
	for id, q := range s.queues {
		out = append(out, node.BalanceBot{ID: id, Queue: slices.Clone(q)})
	}
	return out
}

func (s *queueSim) toBack(bot, id string) {
	q := s.queues[bot]
	if i := slices.Index(q, id); i >= 0 {
		s.queues[bot] = append(append(slices.Clone(q[:i]), q[i+1:]...), id)
	}
}

func (s *queueSim) round(p node.BalancePlan, now time.Time) {
	for _, m := range p.Moves {
		if !m.Ready() {
			for _, id := range m.Ahead {
				s.toBack(m.Bot, id)
			}
			continue
		}
		s.moves[m.Bot] = node.BalanceMove{From: m.From, To: m.To, At: now}
		s.toBack(m.Bot, m.From)
		s.log[m.Bot] = append(s.log[m.Bot], now)
	}
}

// kill takes id out of every queue; its bots go to the next in queue (a
// failover: not the balancer's move). revive queues it at the back.
func (s *queueSim) kill(id string) {
	for bot, q := range s.queues {
		if len(q) > 0 && q[0] == id {
			s.log[bot] = append(s.log[bot], time.Time{}) // a failover
		}
		s.queues[bot] = slices.DeleteFunc(slices.Clone(q), func(x string) bool { return x == id })
	}
}

func (s *queueSim) revive(id string) {
	for bot := range s.queues {
		s.queues[bot] = append(s.queues[bot], id)
	}
}

// No ping-pong, and convergence: a node killed and brought back twice
// within ten minutes, the plan applied as the nodes apply it: every 10 s,
// and after a look that moved anything (a step back or a handover takes
// a node out of a queue for a moment) only once the membership has been
// steady for two intervals (BalanceConfig.Steady), so 30 s later. The
// spread is back within the band within 2 minutes of each return, for
// 60 bots and for a fleet of 1,000, and no bot is moved by the balancer
// twice within the cooldown.
func TestPlanBalanceConvergesWithoutPingPong(t *testing.T) {
	for _, bots := range []int{60, 1000} {
		t.Run(fmt.Sprintf("%d bots", bots), func(t *testing.T) { convergesWithoutPingPong(t, bots) })
	}
}

func convergesWithoutPingPong(t *testing.T, bots int) {
	clk := fakeclock.New(balanceEpoch)
	ids := []string{"a", "b", "c"}
	sim := &queueSim{queues: map[string][]string{}, moves: map[string]node.BalanceMove{}, log: map[string][]time.Time{}}
	for i := range bots {
		q := []string{"a", "b", "c"}
		sim.queues[fmt.Sprintf("b%04d", i)] = append(q[i%3:], q[:i%3]...)
	}
	live := map[string]bool{"a": true, "b": true, "c": true}
	plan := func() node.BalancePlan {
		var nodes []node.BalanceNode
		for _, id := range ids {
			if live[id] {
				nodes = append(nodes, balancing(id)...)
			}
		}
		in := input(nodes, sim.bots(), clk.Now())
		in.Moves, in.MaxMoves = sim.moves, node.DefaultBalanceMaxMoves
		return node.PlanBalance(in)
	}
	settle := func(what string) {
		t.Helper()
		start := clk.Now()
		for {
			p := plan()
			if p.Balanced() && len(p.Moves) == 0 {
				return
			}
			if clk.Since(start) > 2*time.Minute {
				t.Fatalf("%s: not balanced 2 minutes on: %+v", what, p.Spread)
			}
			sim.round(p, clk.Now())
			if len(p.Moves) > 0 {
				clk.Step(20 * time.Second) // the membership's steady wait
			}
			clk.Step(10 * time.Second)
		}
	}
	settle("start")
	for round, victim := range []string{"c", "a", "c"} {
		sim.kill(victim)
		live[victim] = false
		clk.Step(30 * time.Second)
		live[victim] = true
		sim.revive(victim)
		settle(fmt.Sprintf("return %d of %s", round, victim))
		clk.Step(time.Minute)
	}
	for bot, at := range sim.log {
		var last time.Time
		for _, m := range at {
			if m.IsZero() {
				continue // a failover
			}
			if !last.IsZero() && m.Sub(last) < 10*time.Minute {
				t.Fatalf("bot %s moved by the balancer at %s and again at %s", bot, last, m)
			}
			last = m
		}
	}
}
