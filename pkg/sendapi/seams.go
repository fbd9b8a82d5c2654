package sendapi

import (
	"context"
	"errors"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
)

// Node is what the send API asks of the node it runs on: which bots it
// serves, the connection and send budget of a bot it leads, the gate of
// half-open recovery, and who leads a bot it does not.
type Node interface {
	// Serves reports whether bot is one of the node's bots (the
	// configuration file's, or the bot registry's it serves now).
	Serves(bot string) bool
	// Conn is the node's WeCom connection of bot while it leads it, else
	// nil: a send is made here only on it.
	Conn(bot string) *wecom.Conn
	// Budget is bot's per-conversation send budget, the one its pusher
	// spends for every answer frame and push.
	Budget(bot string) Budget
	// Gate holds proactive sends while bot's connection is in half-open
	// recovery.
	Gate(bot string) Gate
	// Leader is the node that holds bot's election now and its API
	// address ("" when it is not in the node registry). The error is
	// election.ErrNoLeader when no node does, ErrNoLeaderLookup when this
	// node cannot read the election.
	Leader(ctx context.Context, bot string) (id, addr string, err error)
}

// ErrNoLeaderLookup is Node.Leader's error on a node without an etcd
// client to read the election with.
var ErrNoLeaderLookup = errors.New("no etcd client to find the leader with")

// Budget is a bot's per-conversation send budget (pace.Budget).
type Budget interface {
	// Spend takes a slot of chat's budget, or says how long until one
	// frees (reserve: slots kept back; the send API keeps none).
	Spend(chat string, reserve int) (wait time.Duration, ok bool)
	// Refund gives back a slot of a send WeCom did not count.
	Refund(chat string)
	// Refused lowers chat's budget after WeCom refused for its quota.
	Refused(chat string)
	// Free is when chat's next slot frees.
	Free(chat string) time.Time
}

// Gate is a bot's backlog gate (recovery.Gate): how long a send waits
// now, 0 when it need not.
type Gate interface {
	Wait(now time.Time) time.Duration
}
