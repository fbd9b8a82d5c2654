package serve

import (
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/pusher"
)

// leaders is what this node holds for the bots it leads: each bot's
// per-conversation send budget (kept across terms: WeCom's quota does not
// restart with a connection) and the current term's pusher. The inbound
// path, the spool's forwarder and the worker reach a bot's pusher through
// it, so none of them holds a pusher that outlived its term.
type leaders struct {
	budget       int // sends per minute per conversation (push.budget)
	budgetHourly int // sends per hour per conversation (push.budget_hourly)

	mu      sync.Mutex
	pushers map[string]*pusher.Pusher // bot → the current term's pusher
	budgets map[string]*pace.Budget   // bot → its conversations' budget
	terms   int                       // terms with a pusher running
}

func newLeaders(budget, budgetHourly int) *leaders {
	return &leaders{budget: budget, budgetHourly: budgetHourly, pushers: map[string]*pusher.Pusher{}, budgets: map[string]*pace.Budget{}}
}

// Budget is bot's per-conversation send budget, shared by the inbound
// path and every term's pusher.
func (l *leaders) Budget(bot string) *pace.Budget {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.budgets[bot]
	if b == nil {
		b = pace.New(l.budget, time.Minute, nil).AndAtMost(l.budgetHourly, time.Hour)
		l.budgets[bot] = b
	}
	return b
}

// Pusher is bot's pusher while this node leads it, else nil.
func (l *leaders) Pusher(bot string) *pusher.Pusher {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pushers[bot]
}

// each calls fn for every running pusher, under the lock (fn must not
// block).
func (l *leaders) each(fn func(bot string, p *pusher.Pusher)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for bot, p := range l.pushers {
		fn(bot, p)
	}
}

// LeadsAny reports whether this node leads a bot now (its worker's
// leader slots apply).
func (l *leaders) LeadsAny() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.terms > 0
}

// begin records p as bot's pusher for a term; end, with the same p,
// forgets it (unless a later term's pusher replaced it).
func (l *leaders) begin(bot string, p *pusher.Pusher) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pushers[bot] = p
	l.terms++
}

func (l *leaders) end(bot string, p *pusher.Pusher) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pushers[bot] == p {
		delete(l.pushers, bot)
	}
	l.terms--
}

// Dispatched tells bot's pusher, if this node leads it, of a task handed
// to compute (or a busy refusal recorded for later) in conversation chat.
func (l *leaders) Dispatched(bot, taskID, chat string) {
	if p := l.Pusher(bot); p != nil {
		p.NotifyChat(taskID, chat)
	}
}

// Forwarded tells bot's pusher, if this node leads it, of a spooled task
// JetStream has taken.
func (l *leaders) Forwarded(bot, taskID string) {
	if p := l.Pusher(bot); p != nil {
		p.Notify(taskID)
	}
}

// Idle predicts from bot's pusher's memory that conversation chat has no
// task; false when this node does not lead bot.
func (l *leaders) Idle(bot, chat string) bool {
	p := l.Pusher(bot)
	return p != nil && p.Idle(chat)
}

// watermark forwards the inbound path's handled messages to the inbound
// watermark's tracker, once JetStream is bound (before, nothing is
// recorded in the cluster, so the watermark must not move).
type watermark struct{ n *Node }

func (w watermark) Handled(bot string, created time.Time) {
	if t := w.n.tracker.Load(); t != nil {
		t.Handled(bot, created)
	}
}

var (
	_ access.Outbound  = (*leaders)(nil)
	_ access.Watermark = watermark{}
)
