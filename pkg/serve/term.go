package serve

import (
	"context"
	"sync"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/wecom"
)

// termHooks is a connected term's work on this node (node.TermHooks): the
// bot's pusher and the lifecycle's sweep on its connection (Node.leading),
// then access's wait for every callback that connection delivered.
type termHooks struct{ n *Node }

func (h termHooks) WorkOnConn(ctx context.Context, term *election.Term, conn *wecom.Conn) {
	h.n.leading(ctx, term, conn)
}

func (h termHooks) Drain(ctx context.Context, term *election.Term) {
	h.n.Access.WaitTerm(ctx, term)
}

// leading is a term's work on its connection, once JetStream is bound:
// the bot's pusher and the lifecycle's sweep, until ctx (the term) ends.
func (n *Node) leading(ctx context.Context, term *election.Term, conn *wecom.Conn) {
	var p *pusher.Pusher
	defer func(ended func(*pusher.Pusher)) { ended(p) }(n.obs.term(term.Bot, conn))
	defer n.backfill.Connected(term.Bot, conn)()
	select {
	case <-n.ready:
	case <-ctx.Done():
		return
	}
	cfg, log := n.cfg, n.log
	var err error
	p, err = pusher.New(pusher.Config{
		Bot: term.Bot, NodeID: cfg.NodeID, TermRev: term.Rev, Conn: conn, Store: n.Store, Lifecycle: n.Lifecycle,
		Budget: n.Budget(term.Bot), StreamWindow: cfg.Push.StreamWindow, Heartbeat: cfg.Push.Heartbeat,
		HeartbeatLine: cfg.Push.HeartbeatLine, QueuedLine: cfg.Push.QueuedLine, TruncatedNote: cfg.Push.TruncatedNote, HandoverNote: cfg.Push.HandoverNote,
		BusyNote: access.DefaultBusy, Notes: n.bots, Thinking: n.bots,
		Gate: n.Health.Gate(term.Bot), Health: n.Health, ReplayExpiry: cfg.Push.ReplayExpiry,
		Metrics: n.obs,
		Logger:  log,
	})
	if err != nil {
		log.Error().Err(err).Msg("pusher not started")
		return
	}
	n.leaders.begin(term.Bot, p)
	defer n.leaders.end(term.Bot, p)
	var wg sync.WaitGroup
	wg.Go(func() { n.Lifecycle.RunSweep(ctx, term.Bot, n.cfg.Worker.Deadline, 2*n.Store.Options().TaskAckWait) })
	wg.Go(func() { n.backfill.Audit(ctx, term) })
	wg.Go(func() { n.holdMCP(ctx, term, conn) })
	if err := p.Run(ctx); err != nil {
		log.Error().Err(err).Str("bot", term.Bot).Msg("pusher stopped")
	}
	n.handover(ctx, term, conn, p)
	wg.Wait()
}

// handoverWithin bounds the closing of a term's open streams at a
// graceful stop: the node holds the bot (and its lease) meanwhile.
const handoverWithin = 5 * time.Second

// handover closes the streams still open on conn when the term's work
// ended by a graceful stop (the term and the connection still this
// node's): the next leader cannot continue them (pusher.Handover). After
// a lost term or a closed connection there is nothing to write on.
func (n *Node) handover(ctx context.Context, term *election.Term, conn *wecom.Conn, p *pusher.Pusher) {
	if term.Err() != nil {
		return
	}
	select {
	case <-conn.Done():
		return
	default:
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handoverWithin)
	defer cancel()
	p.Handover(hctx, func() bool { return n.Access.Handling(term) })
}
