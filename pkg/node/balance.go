package node

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// The balancer's decision: which bots to hand over, to whom, and why. It
// is a pure function of what every node can read in etcd (the live nodes
// and their weights, every bot's election queue, the bot's last move) and
// the time, so that each node computes the same plan from the same
// reading and acts only on its own part of it (balancer.go): a leader
// hands over a bot whose planned new leader is next in its queue, and a
// standby that waits ahead of a planned new leader leaves the queue and
// joins again at its back, so that the handover lands there.

// BalanceNode is one live node as the plan sees it.
type BalanceNode struct {
	ID string `json:"id"`
	// Weight is the node's capacity relative to the others' (its share
	// of each bot it may lead is its weight over the sum of theirs); 0
	// or less reads as 1.
	Weight float64 `json:"weight"`
	// Balances: the node runs the balancer, so it hands over and steps
	// back when a plan asks. Moves that would need a node that does not
	// are not planned.
	Balances bool `json:"balances"`
}

// BalanceBot is one bot's election queue: the node of each candidate key
// in the order they lead (Queue[0] leads), live or not; a node that is
// not live (not among the input's nodes) neither leads in the plan's
// eyes nor may be handed a bot, but still holds its place in the queue
// until its lease goes.
type BalanceBot struct {
	ID    string   `json:"id"`
	Queue []string `json:"queue"`
}

// BalanceMove is the record of a bot's last move by the balancer
// (etcdkeys BalanceMove), kept for the move cooldown.
type BalanceMove struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"`
}

// BalanceInput is everything a plan is made of.
type BalanceInput struct {
	Nodes []BalanceNode
	Bots  []BalanceBot
	// Moves is each bot's last move by the balancer.
	Moves map[string]BalanceMove
	Now   time.Time
	// Tolerance is how far from its even share a node's count may be:
	// 0.1 is ±10 % (see NodeSpread for the rounding).
	Tolerance float64
	// Cooldown: a bot moved by the balancer is not moved again for this
	// long (its leader failing moves it regardless: that is not a plan's).
	Cooldown time.Duration
	// Settle: a move recorded this recently whose bot its old leader
	// still leads is in flight (a drain takes a while): the plan counts
	// the bot as its new leader's.
	Settle time.Duration
	// MaxMoves bounds the handovers planned away from one node (0: no
	// bound): MaxMoves, or a quarter of the bots the node leads where
	// that is more (moveBound). A move whose new leader is not yet next
	// in the bot's queue is not bounded: this look only steps the nodes
	// ahead back, a cheap change of the queue that readies the move for
	// the next look's handovers instead of costing a look of its own.
	MaxMoves int
}

// NodeSpread is one node's part of the leadership.
type NodeSpread struct {
	Node   string  `json:"node"`
	Weight float64 `json:"weight"`
	// Leads is how many bots the node leads (a move in flight counted at
	// its destination).
	Leads int `json:"leads"`
	// Share is the node's even share: the sum, over the bots it may lead
	// (it waits in their queue or leads them), of its weight over the
	// weights of all the live nodes that may lead each.
	Share float64 `json:"share"`
	// Low and High are the counts the balancer keeps the node within:
	// Share less and plus Tolerance of it, rounded inward, but never
	// narrower than the whole numbers around Share (a share of 2.33 at
	// ±10 % allows 2 or 3; one of 33.3 allows 30 to 36).
	Low  int `json:"low"`
	High int `json:"high"`
}

// Off says whether the node is out of its band.
func (s NodeSpread) Off() bool { return s.Leads < s.Low || s.Leads > s.High }

// PlannedMove is one bot to hand over.
type PlannedMove struct {
	Bot  string `json:"bot"`
	From string `json:"from"`
	To   string `json:"to"`
	// Ahead are the live nodes waiting in the bot's queue before To: each
	// steps back (joins the queue again at its back) before From hands
	// over, so that To leads next. Empty: From may hand over now.
	Ahead  []string `json:"ahead,omitempty"`
	Reason string   `json:"reason"`
}

// Ready says whether From may hand over now: To is next in the queue.
func (m PlannedMove) Ready() bool { return len(m.Ahead) == 0 }

// BalancePlan is a plan: the spread as it is, the moves that bring it
// within every node's band, and notes on what the plan cannot fix.
type BalancePlan struct {
	Spread []NodeSpread   `json:"spread"`
	Moves  []PlannedMove  `json:"moves"`
	Notes  []string       `json:"notes,omitempty"`
	After  map[string]int `json:"after"` // each node's count once the moves are made
}

// Balanced says whether every node is within its band.
func (p BalancePlan) Balanced() bool {
	for _, s := range p.Spread {
		if s.Off() {
			return false
		}
	}
	return true
}

// balanceBot is a bot as planBalance works on it.
type balanceBot struct {
	id       string
	leader   string   // the live node counted as leading it ("" none)
	may      []string // the live nodes in its queue, in queue order
	queue    []string // the whole queue
	movable  bool
	heldTill time.Time // the cooldown's end, if it holds the bot
}

// PlanBalance makes the plan for in. It is deterministic: the same input
// gives the same plan, whatever the order of in.Nodes and in.Bots.
//
// A move is planned only if it is needed (its source is above its band or
// its destination below its own) and it narrows the spread (the source's
// excess over its share exceeds the destination's by more than one bot,
// so the sum of squared excesses falls and planning ends). Among the
// moves possible the one between the most and the least loaded nodes is
// taken first; among its bots, one whose destination is next in its
// queue (no step back needed), then the lowest bot id. A bot is never
// planned to move twice, nor within Cooldown of its last move, nor away
// from or past a node that does not balance.
func PlanBalance(in BalanceInput) BalancePlan {
	nodes := map[string]BalanceNode{}
	for _, n := range in.Nodes {
		if n.Weight <= 0 {
			n.Weight = 1
		}
		nodes[n.ID] = n
	}
	bots := balanceBots(in, nodes)
	share, leads := map[string]float64{}, map[string]int{}
	for _, b := range bots {
		w := 0.0
		for _, id := range b.may {
			w += nodes[id].Weight
		}
		for _, id := range b.may {
			share[id] += nodes[id].Weight / w
		}
		if b.leader != "" {
			leads[b.leader]++
		}
	}
	ids := make([]string, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	plan := BalancePlan{Moves: []PlannedMove{}, After: map[string]int{}}
	band := map[string]NodeSpread{}
	for _, id := range ids {
		s := spreadOf(id, nodes[id].Weight, leads[id], share[id], in.Tolerance)
		band[id] = s
		plan.Spread = append(plan.Spread, s)
		plan.After[id] = s.Leads
	}
	moved := map[string]int{}
	for {
		m, ok := bestMove(bots, nodes, band, plan.After, moved, in.MaxMoves)
		if !ok {
			break
		}
		plan.Moves = append(plan.Moves, m)
		plan.After[m.From]--
		plan.After[m.To]++
		if m.Ready() {
			moved[m.From]++
		}
	}
	plan.Notes = balanceNotes(ids, band, plan.After, bots, in.Now)
	return plan
}

// balanceBots reads each bot's leader, the live nodes that may lead it
// and whether the plan may move it, in bot id order.
func balanceBots(in BalanceInput, nodes map[string]BalanceNode) []*balanceBot {
	var out []*balanceBot
	for _, bb := range in.Bots {
		b := &balanceBot{id: bb.ID, queue: bb.Queue}
		seen := map[string]bool{}
		for _, id := range bb.Queue {
			if _, live := nodes[id]; live && !seen[id] {
				seen[id] = true
				b.may = append(b.may, id)
			}
		}
		if len(b.may) == 0 {
			continue // no live node may lead it: nobody's share
		}
		if len(bb.Queue) > 0 && seen[bb.Queue[0]] {
			b.leader = bb.Queue[0]
		}
		last, ok := in.Moves[bb.ID]
		inFlight := ok && b.leader != "" && b.leader == last.From && seen[last.To] && in.Now.Sub(last.At) < in.Settle
		if inFlight {
			b.leader = last.To
		}
		b.movable = b.leader != "" && !inFlight && len(b.may) > 1
		if ok && in.Now.Sub(last.At) < in.Cooldown {
			b.movable, b.heldTill = false, last.At.Add(in.Cooldown)
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// spreadOf is a node's spread with its band.
func spreadOf(id string, weight float64, leads int, share, tolerance float64) NodeSpread {
	share = math.Round(share*1e6) / 1e6 // float sums: 2.9999999 is 3
	tol := share * tolerance
	return NodeSpread{
		Node: id, Weight: weight, Leads: leads, Share: share,
		Low:  int(min(math.Ceil(share-tol), math.Floor(share))),
		High: int(max(math.Floor(share+tol), math.Ceil(share))),
	}
}

// bestMove is the next move, if one is needed and possible.
func bestMove(bots []*balanceBot, nodes map[string]BalanceNode, band map[string]NodeSpread, after, moved map[string]int, maxMoves int) (PlannedMove, bool) {
	excess := func(id string) float64 { return float64(after[id]) - band[id].Share }
	var best PlannedMove
	var bestBot *balanceBot
	bestScore, found := 0.0, false
	for _, b := range bots {
		from := b.leader
		if !b.movable || !nodes[from].Balances {
			continue
		}
		full := maxMoves > 0 && moved[from] >= moveBound(maxMoves, band[from].Leads)
		for _, to := range b.may {
			if to == from {
				continue
			}
			needed := after[from] > band[from].High || after[to] < band[to].Low
			score := excess(from) - excess(to)
			if !needed || score <= 1+1e-9 {
				continue
			}
			ahead, ok := aheadOf(b.queue, from, to, nodes)
			if !ok || (full && len(ahead) == 0) {
				continue
			}
			better := !found || score > bestScore+1e-9 ||
				(math.Abs(score-bestScore) <= 1e-9 && len(ahead) == 0 && !best.Ready())
			if better {
				best = PlannedMove{Bot: b.id, From: from, To: to, Ahead: ahead}
				bestBot, bestScore, found = b, score, true
			}
		}
	}
	if !found {
		return PlannedMove{}, false
	}
	bestBot.movable = false
	best.Reason = moveReason(band[best.From], after[best.From], band[best.To], after[best.To])
	return best, true
}

// moveBound is how many moves one plan makes away from a node that leads
// leads bots: maxMoves, or a quarter of its bots where that is more. A
// node that comes back to a fleet of 1,000 bots on three is owed 333:
// about four looks at 125 from each of the other two, where 20 a look
// took minutes; a fleet of tens of bots moves as few as before.
func moveBound(maxMoves, leads int) int { return max(maxMoves, leads/4) }

// aheadOf lists the nodes waiting in queue between from (the leader) and
// to; false if one of them cannot step back (it does not balance, or is
// not live: its key stays until its lease ends) or to is not queued.
func aheadOf(queue []string, from, to string, nodes map[string]BalanceNode) ([]string, bool) {
	var ahead []string
	for _, id := range queue[1:] {
		if id == to {
			return ahead, true
		}
		if id == from {
			continue // an older candidacy of the leader: gone with its lease
		}
		n, live := nodes[id]
		if !live || !n.Balances {
			return nil, false
		}
		ahead = append(ahead, id)
	}
	return nil, false
}

// moveReason says why a move is planned, with the counts before it.
func moveReason(from NodeSpread, fromLeads int, to NodeSpread, toLeads int) string {
	return fmt.Sprintf("%s leads %d, %s its band %d–%d (share %.1f); %s leads %d, %s its band %d–%d (share %.1f)",
		from.Node, fromLeads, where(fromLeads, from), from.Low, from.High, from.Share,
		to.Node, toLeads, where(toLeads, to), to.Low, to.High, to.Share)
}

func where(leads int, s NodeSpread) string {
	switch {
	case leads > s.High:
		return "above"
	case leads < s.Low:
		return "below"
	}
	return "within"
}

// balanceNotes says, for each node still out of its band once the moves
// are made, why the plan cannot do more.
func balanceNotes(ids []string, band map[string]NodeSpread, after map[string]int, bots []*balanceBot, now time.Time) []string {
	var notes []string
	for _, id := range ids {
		s := band[id]
		if after[id] >= s.Low && after[id] <= s.High {
			continue
		}
		held, till := 0, time.Time{}
		for _, b := range bots {
			// Over its band: its own bots held; under it: the others' it may lead.
			mine := b.leader == id
			if after[id] < s.Low {
				mine = b.leader != id && slices.Contains(b.may, id)
			}
			if mine && !b.heldTill.IsZero() {
				held++
				if till.IsZero() || b.heldTill.Before(till) {
					till = b.heldTill
				}
			}
		}
		note := fmt.Sprintf("%s stays at %d, %s its band %d–%d: no move is possible now", id, after[id], where(after[id], s), s.Low, s.High)
		if held > 0 {
			note += fmt.Sprintf(" (%d bot(s) that could move moved within the cooldown; the first may move again in %s)", held, till.Sub(now).Round(time.Second))
		} else {
			note += " (no node that may take one of its bots, or give it one, is free to: a node without the balancer, a bot only it may lead, or the moves per round used up)"
		}
		notes = append(notes, note)
	}
	return notes
}
