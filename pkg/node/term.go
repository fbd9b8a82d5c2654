package node

import (
	"context"
	"errors"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
)

// leadResult is how a term went, for the bot's loop.
type leadResult struct {
	connected  bool
	authFailed bool
	kicked     bool
	held       time.Duration // how long the connection lasted
	reason     string
	term       int64             // the term's revision
	kickOrigin kickOrigin        // who kicked, if kicked
	kickDetail string            // the evidence kickOrigin was decided on
	closed     wecom.CloseReason // why the connection ended, if it was up
}

// lead is one term: verify, connect, wait for the end, close, drain,
// resign. The connection is closed and gone, and what it delivered
// drained, before the term is resigned. stop ending is a graceful stop (see
// the package comment); the term ending is lost leadership. A blip of a
// stable connection (keepTerm) is reconnected under the same term, as
// often as it happens, so the standbys waiting in the election's queue do
// not take the bot for a blip; a reconnect that fails ends the term.
func (n *Node) lead(stop context.Context, term *election.Term, b config.Bot, log zerolog.Logger) (res leadResult) {
	log = log.With().Int64("term", term.Rev).Logger()
	res.term = term.Rev
	n.setState(b.ID, StateConnecting, "", term.Rev)
	n.leaderEvent(b.ID, "leading", "", term.Rev)
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), ResignTimeout)
		defer cancel()
		if err := term.Resign(rctx); err != nil {
			log.Warn().Err(err).Msg("resign failed")
		}
		n.leaderEvent(b.ID, "resigned", res.reason, term.Rev)
	}()

	// Verify and dial end with the term or the stop, whichever is first.
	dctx, cancelDial := context.WithCancel(term.Context())
	defer cancelDial()
	defer context.AfterFunc(stop, cancelDial)()
	for {
		res = n.connect(stop, dctx, term, b, log)
		if !keepTerm(res, term.Err(), stop.Err(), n.cfg.StableTerm) {
			return res
		}
		log.Info().Str("reason", res.reason).Dur("held", res.held).Msg("a blip after a stable connection: reconnecting under the same term")
		n.setState(b.ID, StateConnecting, "reconnecting under the same term: "+res.reason, term.Rev)
		n.leaderEvent(b.ID, "reconnecting", res.reason, term.Rev)
	}
}

// keepTerm decides, once a connection of a term has ended and been
// drained, whether the node reconnects under the same term rather than
// resign: the connection held at least stable and then ended by itself
// (the network, missed heartbeats or acks, or the health monitor closing
// a sick link), the term is still valid (its lease renewed: no other node
// can lead meanwhile) and the node is not stopping. Resigning instead
// would put this node's new candidacy behind every standby's, so a
// standby would lead after every blip. A kick, a connection WeCom no
// longer counts as subscribed (another connection fought over the bot),
// a refused subscribe, a full callback queue (this node is overloaded) or
// a connection shorter than stable go through the election as before.
func keepTerm(res leadResult, termErr, stopErr error, stable time.Duration) bool {
	if !res.connected || res.kicked || res.authFailed || termErr != nil || stopErr != nil || res.held < stable {
		return false
	}
	switch res.closed {
	case wecom.ReasonNetwork, wecom.ReasonHeartbeatLost, wecom.ReasonAckTimeouts, wecom.ReasonUnhealthy:
		return true
	}
	return false
}

// connect is one connection of a term: verify, dial, hold it (the term's
// work on it, a new secret proved on the way) until its end, close,
// drain.
func (n *Node) connect(stop, dctx context.Context, term *election.Term, b config.Bot, log zerolog.Logger) (res leadResult) {
	res.term = term.Rev
	if reason, ok := n.verify(dctx, term, log); !ok {
		res.reason = reason
		return res
	}

	wc := n.cfg.WeCom
	// Checked right before Dial, and again after the handshake, right
	// before the subscribe frame is written (the handshake may take a
	// while; Dial also ends with the term's context).
	if err := term.Check(); err != nil {
		res.reason = "term ended before connecting: " + err.Error()
		return res
	}
	wc.BeforeSubscribe = term
	// The connection adds bot (and conn) itself.
	wc.BotID, wc.Secret, wc.Logger = b.ID, b.Secret, n.log.With().Int64("term", term.Rev).Logger()
	h := n.cfg.Health
	if h != nil {
		h.Dialing(term)
	}
	conn, err := wecom.Dial(dctx, wc, termInbound{in: n.cfg.Inbound, term: term, log: n.log})
	if h != nil {
		h.Dialed(term, conn, err)
	}
	if err != nil {
		res.reason = err.Error()
		if errors.Is(err, wecom.ErrAuthFailed) {
			res.authFailed = true
			n.leaderEvent(b.ID, "auth_failed", err.Error(), term.Rev)
		} else {
			log.Warn().Err(err).Msg("connect failed")
		}
		return res
	}
	connected := time.Now()
	res.connected = true
	n.setState(b.ID, StateLeader, "", term.Rev)
	n.leaderEvent(b.ID, "connected", "", term.Rev)
	log.Info().Msg("leading: WeCom connection up")

	conn, stopWork, workDone := n.hold(stop, term, conn, log)
	if h != nil {
		h.Ended(term, conn, conn.Reason() == wecom.ReasonClosedByUs && term.Err() == nil)
	}
	stopWork()
	<-workDone
	res.held = time.Since(connected)
	res.closed = conn.Reason()
	switch conn.Reason() {
	case wecom.ReasonClosedByUs:
		if err := term.Err(); err != nil {
			res.reason = "term ended: " + err.Error()
		} else if cause := context.Cause(stop); cause != nil {
			res.reason = "stopped: " + cause.Error()
		} else {
			res.reason = "closed by this node"
		}
	case wecom.ReasonKicked:
		res.kicked = true
		res.reason = "kicked: another connection subscribed with this bot"
		res.kickOrigin, res.kickDetail = n.kickOf(term)
	default:
		res.reason = conn.Err().Error()
	}
	log.Info().Str("reason", res.reason).Dur("held", res.held).Msg("connection ended")
	n.setState(b.ID, StateDraining, "connection ended: "+res.reason, term.Rev)
	n.drain(term, log)
	return res
}

// verify is the linearizable read right before connecting: a node that
// was paused or partitioned and lost leadership finds out here and never
// connects. Not ok: why.
func (n *Node) verify(ctx context.Context, term *election.Term, log zerolog.Logger) (string, bool) {
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := term.Verify(vctx)
	cancel()
	if errors.Is(err, election.ErrLegacyLeader) {
		// A rolling upgrade: a node of an older botctl holds the bot in
		// the old layout, which it alone sees. It keeps the bot until it
		// stops; this node resigns and backs off meanwhile.
		log.Warn().Err(err).Msg("won the election but an old-layout leader holds the bot; not connecting")
		return "an older botctl node holds the bot (old election layout); waiting for it to stop: " + err.Error(), false
	}
	if err != nil {
		log.Warn().Err(err).Msg("won the election but could not confirm it; not connecting")
		return "leadership not confirmed: " + err.Error(), false
	}
	return "", true
}

// hold runs the term's work on conn (TermHooks.WorkOnConn) until the
// connection ends, the term ends (closed at once) or stop ends (the
// graceful stop: the work finishes its writes, then the connection is
// closed); it returns once the connection is gone, its work asked to end
// (done closes when it has). A new secret to prove (Prove) is handled on
// the way (rekey): the work on the old connection finishes first, as at
// a graceful stop, then the new secret subscribes; accepted, the new
// connection replaces the old one (which WeCom kicks) and the work starts
// again on it; refused, the work starts again on the old one, which WeCom
// kept.
func (n *Node) hold(stop context.Context, term *election.Term, conn *wecom.Conn, log zerolog.Logger) (*wecom.Conn, context.CancelFunc, chan struct{}) {
	proofs := n.proofs(term.Bot)
	for {
		workCtx, stopWork := context.WithCancel(term.Context())
		workDone := make(chan struct{})
		go func(conn *wecom.Conn) {
			defer close(workDone)
			if n.cfg.Hooks != nil {
				n.cfg.Hooks.WorkOnConn(workCtx, term, conn)
			}
		}(conn)
		select {
		case <-conn.Done():
		case <-term.Done():
			// Leadership lost or in doubt. No lock, no identity: close at once.
			conn.Close()
		case <-stop.Done():
			// A graceful stop: the term is still ours and renewed until we
			// resign. Let WorkOnConn finish its writes in flight on the open
			// connection (each bounded by the ack timeout), then close; but
			// losing the term meanwhile closes at once.
			log.Info().AnErr("why", context.Cause(stop)).Msg("stopping gracefully: draining before resigning")
			stopWork()
			select {
			case <-workDone:
			case <-term.Done():
			case <-conn.Done():
			}
			conn.Close()
		case p := <-proofs:
			stopWork() // workCtx ends: the work returns
			<-workDone
			conn = n.rekey(stop, term, conn, p, log)
			continue
		}
		// The connection's end is its event, not Close returning.
		<-conn.Done()
		return conn, stopWork, workDone
	}
}

// drain waits for TermHooks.Drain, bounded by DrainTimeout: the callbacks the
// term's closed connection delivered are handled before the term is
// resigned, and before the next term's handlers can start.
func (n *Node) drain(term *election.Term, log zerolog.Logger) {
	if n.cfg.Hooks == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.DrainTimeout)
	defer cancel()
	start := time.Now()
	n.cfg.Hooks.Drain(ctx, term)
	if ctx.Err() != nil {
		log.Warn().Dur("drain_timeout", n.cfg.DrainTimeout).
			Msg("inbound handlers still running at the drain deadline; resigning anyway (gap backfill recovers what they did not finish)")
		return
	}
	log.Debug().Dur("took", time.Since(start)).Msg("inbound drained")
}
