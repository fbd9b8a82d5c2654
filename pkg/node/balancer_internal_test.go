package node

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The balancer acts only once nothing of the membership it reads has
// gone for the steady time; a departure starts the wait again, a join
// does not.
func TestSteadinessWaitsAfterADeparture(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	var s steadiness
	steps := []struct {
		m    []string
		at   time.Duration
		want bool
	}{
		{[]string{"a", "b1/a"}, 0, false}, // the first look: wait
		{[]string{"a", "b1/a"}, time.Second, false},
		{[]string{"a", "b1/a"}, 2 * time.Second, true},
		{[]string{"a", "c", "b1/a", "b1/c"}, 3 * time.Second, true},  // c joins: no wait
		{[]string{"a", "c", "b1/c"}, 4 * time.Second, false},         // a left b1's queue
		{[]string{"a", "c", "b1/c", "b1/a"}, 5 * time.Second, false}, // back, but not for long enough
		{[]string{"a", "c", "b1/c", "b1/a"}, 6 * time.Second, true},
		{[]string{"a", "b1/a"}, 7 * time.Second, false}, // c gone
		{[]string{"a", "b1/a"}, 9 * time.Second, true},
	}
	for _, st := range steps {
		if got := s.steady(st.m, t0.Add(st.at), 2*time.Second); got != st.want {
			t.Fatalf("membership %q at %s: steady %v, want %v", st.m, st.at, got, st.want)
		}
	}
	// What had gone at the last departure is kept, for the log line that
	// says why the balancer holds.
	if s.goneN != 2 || !slices.Equal(s.gone, []string{"b1/c", "c"}) {
		t.Fatalf("gone at the last departure: %d %q, want 2 [b1/c c]", s.goneN, s.gone)
	}
}

// The membership is who is live and who is queued for each bot: not the
// queue's order, nor who leads (a handover or a step back changes
// neither), nor nodes that are not live.
func TestMembershipIgnoresOrderAndTheDead(t *testing.T) {
	nodes := []BalanceNode{{ID: "a"}, {ID: "b"}}
	m := func(nodes []BalanceNode, bots ...BalanceBot) string {
		items := membership(BalanceInput{Nodes: nodes, Bots: bots})
		slices.Sort(items)
		return strings.Join(items, " ")
	}
	base := m(nodes, BalanceBot{ID: "b1", Queue: []string{"a", "b"}}, BalanceBot{ID: "b2", Queue: []string{"b"}})
	same := m([]BalanceNode{{ID: "b"}, {ID: "a"}}, BalanceBot{ID: "b2", Queue: []string{"b", "gone"}}, BalanceBot{ID: "b1", Queue: []string{"b", "a"}})
	if base != same {
		t.Fatalf("order or a dead node changed the membership:\n%s\n%s", base, same)
	}
	for name, other := range map[string]string{
		"a node joins a queue": m(nodes, BalanceBot{ID: "b1", Queue: []string{"a", "b"}}, BalanceBot{ID: "b2", Queue: []string{"b", "a"}}),
		"a node leaves":        m(nodes[:1], BalanceBot{ID: "b1", Queue: []string{"a", "b"}}, BalanceBot{ID: "b2", Queue: []string{"b"}}),
		"a bot is added":       m(nodes, BalanceBot{ID: "b1", Queue: []string{"a", "b"}}, BalanceBot{ID: "b2", Queue: []string{"b"}}, BalanceBot{ID: "b3", Queue: []string{"a"}}),
	} {
		if other == base {
			t.Fatalf("%s: the membership did not change", name)
		}
	}
}
