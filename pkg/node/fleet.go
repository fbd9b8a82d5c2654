package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/config"
)

// ErrRemoved is the cause a bot's loop ends with when Drop takes the bot
// off this node: its term, if it holds one, ends as at a graceful stop
// (the connection's work finished, the connection closed, its callbacks
// drained, then the resign).
var ErrRemoved = errors.New("bot removed from this node")

// loop is one bot's loop on this node: the bot as it is served now, and
// how to end the loop.
type loop struct {
	bot    config.Bot
	index  int                     // its place in the start's spread
	cancel context.CancelCauseFunc // nil until Run starts it
	done   chan struct{}           // closed when the loop has ended
	prove  chan proof              // the secrets to prove on the connection held (Prove)
	// signals are the balancer's orders to the loop.
	signals balanceSignals
	// ending: Drop or Refuse ended the loop; refused, once set, is why
	// the bot is shown refused after it ends; again is the bot served
	// again meanwhile (Serve), whose loop starts once this one has ended.
	ending  bool
	refused string
	again   *config.Bot
}

// Serve makes this node campaign for b from now on, beside the bots it
// serves (a loop of its own, started at once if Run runs, else when Run
// starts). For a bot served already, b's secret is the one its next term
// connects with; the term that holds the connection now keeps it.
func (n *Node) Serve(b config.Bot) error {
	if n.cfg.WeCom.URL == "" {
		return fmt.Errorf("node: bot %s: WeCom URL is required to serve a bot (set wecom.url)", b.ID)
	}
	if _, err := election.New(n.cli, n.electionConfig(b.ID)); err != nil {
		return fmt.Errorf("node: bot %s: %w", b.ID, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch l := n.loops[b.ID]; {
	case l != nil && l.ending:
		l.again = &b
	case l != nil:
		l.bot = b
	default:
		n.addLocked(b, len(n.loops))
	}
	return nil
}

// addLocked makes b's loop, started if Run runs; n.mu is held.
func (n *Node) addLocked(b config.Bot, index int) {
	l := &loop{bot: b, index: index, done: make(chan struct{}), prove: make(chan proof, 1), signals: newBalanceSignals()}
	n.loops[b.ID] = l
	if _, ok := n.status[b.ID]; !ok || n.status[b.ID].State == StateRefused {
		n.status[b.ID] = BotStatus{State: StateStarting, Since: time.Now().UTC()}
	}
	if n.runCtx != nil {
		l.index = 0 // added at run time: nothing to spread against
		n.startLocked(l)
	}
}

// Drop ends bot's loop on this node (ErrRemoved) and forgets the bot once
// the loop has ended; the channel returned is closed then. A bot this node
// does not serve: closed at once.
func (n *Node) Drop(bot string) <-chan struct{} { return n.end(bot, "") }

// Refuse is Drop for a bot this node will not serve: once its loop has
// ended the bot stays in the node's status, state refused, with why
// (which must say what to fix, a key file or a setting, and hold no
// secret).
func (n *Node) Refuse(bot, why string) <-chan struct{} { return n.end(bot, why) }

func (n *Node) end(bot, refused string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.loops[bot]
	if l == nil || l.cancel == nil { // not served, or Run has not started it
		delete(n.loops, bot)
		n.forgetLocked(bot, refused)
		done := make(chan struct{})
		close(done)
		return done
	}
	l.ending, l.refused, l.again = true, refused, nil
	l.cancel(ErrRemoved)
	return l.done
}

// forgetLocked drops bot from the status, or shows it refused; n.mu is
// held.
func (n *Node) forgetLocked(bot, refused string) {
	if refused == "" {
		delete(n.status, bot)
	} else {
		n.status[bot] = BotStatus{State: StateRefused, Since: time.Now().UTC(), Reason: refused}
	}
	n.markDirty()
}

// Serves reports whether this node runs a loop for bot.
func (n *Node) Serves(bot string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.loops[bot] != nil
}

// served is bot as this node serves it now (Serve may have changed its
// secret since the loop began).
func (n *Node) served(b config.Bot) config.Bot {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l := n.loops[b.ID]; l != nil {
		return l.bot
	}
	return b
}

// startLocked starts l's loop under Run's context; n.mu is held.
func (n *Node) startLocked(l *loop) {
	ctx, cancel := context.WithCancelCause(n.runCtx)
	l.cancel = cancel
	b := l.bot
	n.loopWG.Go(func() {
		defer close(l.done)
		defer cancel(nil)
		n.botLoop(ctx, l.index, b, l.signals)
		n.mu.Lock()
		if errors.Is(context.Cause(ctx), ErrRemoved) && n.loops[b.ID] == l {
			delete(n.loops, b.ID)
			if l.again != nil {
				n.addLocked(*l.again, 0)
			} else {
				n.forgetLocked(b.ID, l.refused)
			}
		}
		n.mu.Unlock()
	})
}

// markDirty asks for the registration to be rewritten.
func (n *Node) markDirty() {
	select {
	case n.dirty <- struct{}{}:
	default:
	}
}
