package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/schema"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BalanceConfig is the balancer on one node.
//
// Every node runs it; no node coordinates the others, and that is safe:
// every node looks every Interval, reads the same state from etcd (the
// live nodes, every bot's election queue, every bot's last move) and
// makes the same plan of it (PlanBalance is deterministic), and each acts
// only on its own part. Only a bot's leader hands the bot over (one node
// per bot: the election's), and it records the move under etcdkeys
// balance/<bot> before it does; every node's next plan counts the move
// as made while it is in flight and holds the bot for the cooldown, so
// a bot is moved by the balancer at most once per Cooldown whichever
// node looks. A standby waiting ahead of a planned new leader steps back
// (joins the queue again at its back): that moves no leadership. A plan
// made on a stale reading may order a move that a fresher one would not;
// the move is still one graceful handover of a bot out of its cooldown,
// and the next looks correct the spread.
//
// A node acts only once nothing of the membership it reads (the live
// nodes and the nodes queued for each bot) has gone for Steady: a node
// that leaves a queue (it stops, its lease is lost, or it resigned a bot
// and waits before joining the queue again) lowers its share for a while,
// and a move planned on that passing state would move a bot too many and
// hold it for the cooldown. A node joining the queues does not hold the
// balancer back: it only raises its own share.
type BalanceConfig struct {
	// Off turns the balancer off on this node: it neither hands over nor
	// steps back for a plan, and plans move nothing away from it.
	Off bool
	// Interval is how often the node looks. Default 10s.
	Interval time.Duration
	// Tolerance is how far from its even share a node's count may be
	// (0.1: ±10 %). Default 0.1.
	Tolerance float64
	// Cooldown: a bot moved by the balancer is not moved by it again for
	// this long. Default 10m.
	Cooldown time.Duration
	// MaxMoves bounds the bots this node hands over in one look, or a
	// quarter of those it leads where that is more. Default 20.
	MaxMoves int
	// Steady is how long nothing of the membership must have gone before
	// the node acts. Default twice Interval.
	Steady time.Duration
	// Weight is this node's capacity relative to the others': its even
	// share is weighted by it. Default 1.
	Weight float64
}

// Balancer defaults.
const (
	DefaultBalanceInterval  = 10 * time.Second
	DefaultBalanceTolerance = 0.1
	DefaultBalanceCooldown  = 10 * time.Minute
	DefaultBalanceMaxMoves  = 20
)

func (c *BalanceConfig) setDefaults() {
	if c.Interval <= 0 {
		c.Interval = DefaultBalanceInterval
	}
	if c.Tolerance <= 0 {
		c.Tolerance = DefaultBalanceTolerance
	}
	if c.Cooldown <= 0 {
		c.Cooldown = DefaultBalanceCooldown
	}
	if c.MaxMoves <= 0 {
		c.MaxMoves = DefaultBalanceMaxMoves
	}
	if c.Steady <= 0 {
		c.Steady = 2 * c.Interval
	}
	if c.Weight <= 0 {
		c.Weight = 1
	}
}

func (c BalanceConfig) validate() error {
	if c.Tolerance >= 1 {
		return fmt.Errorf("node: balance tolerance %.2f: want less than 1 (0.1 is ±10 %%)", c.Tolerance)
	}
	return nil
}

// settle is how long a recorded move counts as in flight: its drain and
// a campaign round.
func (c BalanceConfig) settle() time.Duration { return max(time.Minute, 3*c.Interval) }

// BalanceSettings is what a node registers of its balancer (Info.Balance),
// so that botctl plans as the nodes do.
type BalanceSettings struct {
	Tolerance  float64 `json:"tolerance"`
	CooldownMS int64   `json:"cooldown_ms"`
	IntervalMS int64   `json:"interval_ms"`
	MaxMoves   int     `json:"max_moves"`
}

func (c BalanceConfig) settings() *BalanceSettings {
	if c.Off {
		return nil
	}
	return &BalanceSettings{Tolerance: c.Tolerance, CooldownMS: c.Cooldown.Milliseconds(), IntervalMS: c.Interval.Milliseconds(), MaxMoves: c.MaxMoves}
}

// Config is the settings as a BalanceConfig.
func (s BalanceSettings) Config() BalanceConfig {
	c := BalanceConfig{Tolerance: s.Tolerance, Cooldown: time.Duration(s.CooldownMS) * time.Millisecond,
		Interval: time.Duration(s.IntervalMS) * time.Millisecond, MaxMoves: s.MaxMoves}
	c.setDefaults()
	return c
}

// ReadBalance reads what a plan is made of, at now: the registered nodes
// (those whose Info.Balance is set balance), every bot's election queue
// under electPrefix ("" means the election package's default) and the
// balancer's last move of each bot. The plan's knobs are cfg's.
func ReadBalance(ctx context.Context, cli *clientv3.Client, prefix, electPrefix string, cfg BalanceConfig, now time.Time) (BalanceInput, error) {
	cfg.setDefaults()
	in := BalanceInput{Moves: map[string]BalanceMove{}, Now: now, Tolerance: cfg.Tolerance, Cooldown: cfg.Cooldown,
		Settle: cfg.settle(), MaxMoves: cfg.MaxMoves}
	nodes, err := Nodes(ctx, cli, prefix)
	if err != nil {
		return in, err
	}
	for _, n := range nodes {
		in.Nodes = append(in.Nodes, BalanceNode{ID: n.ID, Weight: n.Weight, Balances: n.Balance != nil})
	}
	queues, _, err := election.Queues(ctx, cli, electPrefix)
	if err != nil {
		return in, err
	}
	for bot, q := range queues {
		in.Bots = append(in.Bots, BalanceBot{ID: bot, Queue: q})
	}
	dir := prefix + etcdkeys.BalanceDir
	resp, err := cli.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return in, fmt.Errorf("read the balancer's moves: %w", err)
	}
	for _, kv := range resp.Kvs {
		var m BalanceMove
		if json.Unmarshal(kv.Value, &m) == nil {
			in.Moves[strings.TrimPrefix(string(kv.Key), dir)] = m
		}
	}
	return in, nil
}

// ReadBalancePlan reads the cluster and plans as its nodes do: with the
// balancer settings of the first registered node (by id) that runs it,
// or the defaults.
func ReadBalancePlan(ctx context.Context, cli *clientv3.Client, prefix, electPrefix string, now time.Time) (BalancePlan, BalanceConfig, error) {
	nodes, err := Nodes(ctx, cli, prefix)
	if err != nil {
		return BalancePlan{}, BalanceConfig{}, err
	}
	var cfg BalanceConfig
	for _, n := range nodes {
		if n.Balance != nil {
			cfg = n.Balance.Config()
			break
		}
	}
	cfg.setDefaults()
	in, err := ReadBalance(ctx, cli, prefix, electPrefix, cfg, now)
	if err != nil {
		return BalancePlan{}, cfg, err
	}
	return PlanBalance(in), cfg, nil
}

// balanceSignals are a bot loop's orders from the balancer: hand the bot
// over (the planned new leader's id), or step back in its queue.
type balanceSignals struct {
	handover chan string
	stepBack chan struct{}
}

func newBalanceSignals() balanceSignals {
	return balanceSignals{handover: make(chan string, 1), stepBack: make(chan struct{}, 1)}
}

// drain drops orders given before the loop could act on them.
func (s balanceSignals) drain() {
	for {
		select {
		case <-s.handover:
		case <-s.stepBack:
		default:
			return
		}
	}
}

// errHandover stops a term that the balancer hands over (gracefully: the
// term is ours until it resigns). errBalanceStepBack ends a candidacy
// that steps back.
var (
	errHandover        = errors.New("handed over by the balancer")
	errBalanceStepBack = errors.New("stepping back so that the balancer's new leader leads next")
)

// signal gives bot's loop an order, if it runs and has none pending.
func (n *Node) signal(bot string, give func(balanceSignals)) {
	n.mu.Lock()
	l := n.loops[bot]
	n.mu.Unlock()
	if l != nil {
		give(l.signals)
	}
}

// balance looks at the spread every Interval until ctx ends.
func (n *Node) balance(ctx context.Context) {
	cfg := n.cfg.Balance
	if cfg.Off {
		return
	}
	t := clock.Or(n.cfg.Clock).NewTicker(cfg.Interval)
	defer t.Stop()
	var st steadiness
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		n.balanceOnce(ctx, &st)
	}
}

// steadiness follows the membership from look to look.
type steadiness struct {
	members map[string]bool
	since   time.Time
	gone    []string // what had gone at the last look that found any (sorted; at most a few)
	goneN   int      // how many had
}

// steady records the membership read at now and says whether none of it
// has gone for at least need: a live node gone, or a node gone from a
// bot's queue (a node that stops, a leader that resigned and waits to
// join the queue again, a lease lost), at any look since. Joins do not
// count: a node joining the queues only raises its share, so the moves
// a plan makes toward it stay right as it joins more.
func (s *steadiness) steady(members []string, now time.Time, need time.Duration) bool {
	cur := make(map[string]bool, len(members))
	for _, m := range members {
		cur[m] = true
	}
	gone := s.since.IsZero()
	var left []string
	for m := range s.members {
		if !cur[m] {
			left = append(left, m)
		}
	}
	s.members = cur
	if len(left) > 0 {
		gone = true
		slices.Sort(left)
		s.gone, s.goneN = left[:min(len(left), 3)], len(left)
	}
	if gone {
		s.since = now
	}
	return now.Sub(s.since) >= need
}

// membership is the live nodes and, for each bot, the live nodes in its
// queue (not their order, not who leads), one item each.
func membership(in BalanceInput) []string {
	live := map[string]bool{}
	var out []string
	for _, n := range in.Nodes {
		live[n.ID] = true
		out = append(out, n.ID)
	}
	for _, b := range in.Bots {
		for _, id := range b.Queue {
			if live[id] {
				out = append(out, b.ID+"/"+id)
			}
		}
	}
	return out
}

// balanceOnce plans and acts on this node's part: the standby steps
// back where it waits ahead of a new leader; the leader hands over each
// bot it leads whose new leader is next, at most MaxMoves.
func (n *Node) balanceOnce(ctx context.Context, st *steadiness) {
	cfg, self := n.cfg.Balance, n.cfg.NodeID
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	in, err := ReadBalance(rctx, n.cli, n.cfg.Prefix, n.cfg.Election.Prefix, cfg, clock.Or(n.cfg.Clock).Now())
	if err != nil {
		if ctx.Err() == nil {
			n.etcdError("balance")
			n.log.Debug().Err(err).Msg("balancer: reading the cluster failed; next look in an interval")
		}
		return
	}
	if !st.steady(membership(in), in.Now, cfg.Steady) {
		if st.goneN > 0 && st.since.Equal(in.Now) {
			n.log.Info().Int("gone", st.goneN).Strs("e.g.", st.gone).Dur("steady", cfg.Steady).
				Msg("balancer: holding moves: queue entries (bot/node) or nodes gone since the last look; acting once none has gone for steady")
		}
		return // a node left a queue lately: not yet
	}
	plan := PlanBalance(in)
	var ready []PlannedMove
	for _, m := range plan.Moves {
		switch {
		case m.From == self && m.Ready() && n.state(m.Bot) == StateLeader:
			ready = append(ready, m)
		case slices.Contains(m.Ahead, self):
			n.log.Info().Str("bot", m.Bot).Str("to", m.To).Str("reason", m.Reason).Msg("balancer: stepping back in the election so that the new leader is next")
			n.signal(m.Bot, func(s balanceSignals) {
				select {
				case s.stepBack <- struct{}{}:
				default:
				}
			})
		}
	}
	if len(ready) > 0 {
		n.handOver(rctx, ready, in.Now)
	}
}

// handOver records each move, then orders its bot's loop to hand over.
// The records share one lease, of the cooldown and a minute, so they go
// once they no longer hold anything. A move whose record could not be
// written is not made: unrecorded, nothing would hold it to the cooldown.
// An order the bot's loop receives when it no longer leads the bot (the
// term ended in the moment between) is dropped; the bot moved anyway,
// and its record holds it for the cooldown all the same.
func (n *Node) handOver(ctx context.Context, moves []PlannedMove, now time.Time) {
	lease, err := n.cli.Grant(ctx, int64((n.cfg.Balance.Cooldown+time.Minute)/time.Second))
	if err != nil {
		n.etcdError("balance")
		n.log.Warn().Err(err).Msg("balancer: no lease for the moves' records; moving nothing this time")
		return
	}
	for _, m := range moves {
		rec, _ := schema.Marshal(BalanceMove{From: m.From, To: m.To, At: now.UTC(), Reason: m.Reason})
		key := etcdkeys.Layout{Root: n.cfg.Prefix}.BalanceMove(m.Bot)
		if _, err := n.cli.Put(ctx, key, string(rec), clientv3.WithLease(lease.ID)); err != nil {
			n.etcdError("balance")
			n.log.Warn().Err(err).Str("bot", m.Bot).Msg("balancer: recording the move failed; not moving the bot")
			continue
		}
		n.log.Info().Str("bot", m.Bot).Str("to", m.To).Str("reason", m.Reason).Msg("balancer: handing the bot over")
		n.leaderEvent(m.Bot, "handover", "to "+m.To+" by the balancer: "+m.Reason, n.Status()[m.Bot].TermRev)
		n.signal(m.Bot, func(s balanceSignals) {
			select {
			case s.handover <- m.To:
			default:
			}
		})
	}
}

// watchHandover cancels stop with errHandover when the balancer orders
// bot handed over while this node leads it; it returns when stop ends.
func (n *Node) watchHandover(stop context.Context, cancel context.CancelCauseFunc, bot string, sig balanceSignals) {
	for {
		select {
		case <-stop.Done():
			return
		case to := <-sig.handover:
			if n.state(bot) == StateLeader {
				cancel(fmt.Errorf("%w to %s", errHandover, to))
				return
			}
		}
	}
}
