package node

import (
	"testing"
	"time"
)

// The balancer acts only once the membership it reads has held for the
// steady time; any change starts the wait again.
func TestSteadinessWaitsForTheMembershipToHold(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	var s steadiness
	look := func(m string, at time.Duration) bool { return s.steady(m, t0.Add(at), 2*time.Second) }
	steps := []struct {
		m    string
		at   time.Duration
		want bool
	}{
		{"x", 0, false},
		{"x", time.Second, false},
		{"x", 2 * time.Second, true},
		{"y", 3 * time.Second, false}, // changed: wait again
		{"y", 4 * time.Second, false},
		{"y", 5 * time.Second, true},
		{"y", 9 * time.Second, true},
	}
	for _, st := range steps {
		if got := look(st.m, st.at); got != st.want {
			t.Fatalf("membership %q at %s: steady %v, want %v", st.m, st.at, got, st.want)
		}
	}
}

// The membership is who is live and who is queued for each bot: not the
// queue's order, nor who leads (a handover or a step back changes
// neither), nor nodes that are not live.
func TestMembershipIgnoresOrderAndTheDead(t *testing.T) {
	nodes := []BalanceNode{{ID: "a"}, {ID: "b"}}
	m := func(nodes []BalanceNode, bots ...BalanceBot) string {
		return membership(BalanceInput{Nodes: nodes, Bots: bots})
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
