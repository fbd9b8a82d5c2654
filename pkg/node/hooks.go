package node

import (
	"context"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
)

// The node's seams, each implemented by its owner (pkg/serve wires them):
// what receives a term's callbacks (Inbound, pkg/access), the work of a
// connected term (TermHooks: the pusher, then access's drain), what hears
// a connection's life (Observer, pkg/heal/health) and the node's own failures
// (Metrics, pkg/metrics).

// Inbound receives what a leader's connection delivers. Its methods run on
// the connection's dispatch goroutine, one at a time: hand long work off,
// and let TermHooks.Drain wait for it. term is the leadership the
// connection belongs to; its context ends when leadership is lost, or when
// the term is resigned after a graceful stop, which is only after the
// connection has closed and Drain has returned: work bound to it may
// finish.
type Inbound interface {
	HandleMessage(term *election.Term, c *wecom.Conn, reqID string, m *wecom.MsgCallback)
	HandleEvent(term *election.Term, c *wecom.Conn, reqID string, ev *wecom.EventCallback)
}

// termInbound is the wecom.Handler of one term's connection: it hands
// every callback to Inbound with the term it belongs to. Each connection
// gets its own, so callbacks never outlive their term's handler.
type termInbound struct {
	in   Inbound // nil: messages are dropped, each logged
	term *election.Term
	log  zerolog.Logger
}

func (h termInbound) Message(c *wecom.Conn, reqID string, m *wecom.MsgCallback) {
	if h.in == nil {
		h.log.Warn().Str("bot", h.term.Bot).Str("msgid", m.MsgID).Msg("no inbound handler; message dropped")
		return
	}
	h.in.HandleMessage(h.term, c, reqID, m)
}

func (h termInbound) Event(c *wecom.Conn, reqID string, ev *wecom.EventCallback) {
	if h.in != nil {
		h.in.HandleEvent(h.term, c, reqID, ev)
	}
}

// TermHooks are a connected term's work, as client-go's LeaderCallbacks
// are a leader's: WorkOnConn runs while the term holds the connection,
// Drain after the connection is gone. The term is resigned only after
// both have returned.
type TermHooks interface {
	// WorkOnConn runs while this node holds a bot's connection (the
	// pusher): it starts once the connection is up and must return when
	// ctx ends, which happens as soon as the connection or the term ends,
	// or the node stops. On a graceful stop ctx ends first, while the
	// connection is still open, and the connection is closed once
	// WorkOnConn has returned (lost leadership closes it at once instead).
	WorkOnConn(ctx context.Context, term *election.Term, conn *wecom.Conn)
	// Drain is called after a connected term's connection is closed and
	// gone (its Done observed) and before the term is resigned, on every
	// way out of that term. It must return once every callback that
	// connection delivered to Inbound has been handled to the end
	// (published, recorded, receipt attempted), or when ctx ends
	// (Config.DrainTimeout). The term's lease is renewed meanwhile unless
	// the term was lost, so handlers may go on using term.Context(). Wire
	// the inbound handler's wait here (e.g. pkg/access's WaitTerm).
	Drain(ctx context.Context, term *election.Term)
}

// Skew says whether this node's clock is off (pkg/skew's Watch), and
// why: other nodes compare the times it writes with theirs, so such a
// node leads nothing.
type Skew interface {
	Off() (why string, off bool)
}

// Metrics counts the node's own failures.
type Metrics interface {
	// EtcdError hears each etcd request of the node's own loops that
	// failed, by operation: gate (claim or watch the env gate), campaign,
	// registry (the node record and its lease) and transition (writing a
	// leader event). Called on those loops: it must not block.
	EtcdError(op string)
}

// Observer hears a bot's connection life on this node. Its methods are
// called on the bot's loop: they must not block, except AuthHold.
type Observer interface {
	// Dialing: this node leads the bot (Verify passed) and dials now.
	Dialing(term *election.Term)
	// Dialed is the dial's outcome: a subscribed conn, or err
	// (errors.Is(err, wecom.ErrAuthFailed) for rejected credentials).
	Dialed(term *election.Term, conn *wecom.Conn, err error)
	// Ended: conn is gone. graceful: the node stopped or handed the bot
	// over on purpose (a deploy, the env gate), not a failure; a graceful
	// Ended may block briefly (bounded) to record the handover before the
	// term is resigned.
	Ended(term *election.Term, conn *wecom.Conn, graceful bool)
	// AuthHold is called after WeCom rejected the bot's credentials, with
	// the term resigned. It may block until a person has acted (the
	// incident acknowledged), retry has passed (the loop's AuthBackoff,
	// doubling), or ctx ends, and reports whether it waited; false: it
	// has no opinion, and the loop waits retry itself.
	AuthHold(ctx context.Context, bot string, retry time.Duration) bool
	// Conflict: another holder of the bot's credentials, outside this
	// cluster, keeps kicking its connection (kick_limit reached): only a
	// person can stop it.
	Conflict(bot, reason string)
}
