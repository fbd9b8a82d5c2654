package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// errGateMoved stops a term whose bot's gate no longer names this node's
// env (gracefully: the term is ours until it resigns).
var errGateMoved = errors.New("env gate moved to another environment")

// backoff is an exponential wait with jitter: each wait is drawn between
// half and all of the current step, and the step doubles up to max. The
// lower half is never skipped, so however often a path fails, it fails at
// most once per base/2, then once per max/2.
type backoff struct {
	base, max time.Duration
	step      time.Duration // 0: base
}

func (b *backoff) next() time.Duration {
	if b.step == 0 {
		b.step = b.base
	}
	d := b.step/2 + rand.N(b.step/2+1)
	b.step = min(2*b.step, b.max)
	return d
}

func (b *backoff) reset() { b.step = 0 }

// botLoop is one bot's life on this node, until ctx ends.
func (n *Node) botLoop(ctx context.Context, index int, b config.Bot) {
	log := n.log.With().Str("bot", b.ID).Logger()
	el, err := election.New(n.cli, n.electionConfig(b.ID))
	if err != nil { // validated in New; unreachable
		log.Error().Err(err).Msg("election config")
		return
	}
	defer n.setState(b.ID, StateStopped, "node stopping", 0)
	// retry paces terms that did not give a stable connection; etcdRetry
	// paces the loop's own etcd errors, and resets once etcd answers.
	retry := backoff{base: n.cfg.Backoff, max: n.cfg.BackoffMax}
	etcdRetry := backoff{base: n.cfg.Backoff, max: n.cfg.BackoffMax}
	authWait := n.cfg.AuthBackoff
	kicks, humanWait := foreignKicks{limit: n.cfg.KickLimit, window: n.cfg.KickWindow}, n.cfg.AuthBackoff
	wait := func(bo *backoff, reason string) {
		d := bo.next()
		n.setState(b.ID, StateBackoff, reason, 0)
		log.Info().Str("reason", reason).Dur("retry_in", d).Msg("backing off before campaigning again")
		pause.For(ctx, d)
	}
	// At start, campaign for the node's bots one SpreadDelay apart, so
	// nodes that start together do not each race for every bot at once.
	if !pause.For(ctx, time.Duration(index)*n.cfg.SpreadDelay) {
		return
	}
	for ctx.Err() == nil {
		gate, rev, err := claimGate(ctx, n.cli, n.cfg.Prefix, b.ID, n.cfg.Env)
		if err != nil {
			if ctx.Err() == nil {
				n.etcdError("gate")
				log.Warn().Err(err).Msg("env gate unreadable; retrying")
				wait(&etcdRetry, "env gate unreadable: "+err.Error())
			}
			continue
		}
		etcdRetry.reset()
		if gate != n.cfg.Env {
			n.setState(b.ID, StateGated, gatedReason(b.ID, gate, n.cfg.Env), 0)
			log.Info().Str("gate", gate).Str("env", n.cfg.Env).Str("reason", gatedReason(b.ID, gate, n.cfg.Env)).Msg("bot gated to another env; not campaigning")
			n.waitGate(ctx, b.ID, rev, func(env string) bool { return env != gate })
			continue
		}

		n.setState(b.ID, StateStandby, "", 0)
		if k := n.leading(); k > 0 && !pause.For(ctx, time.Duration(k)*n.cfg.SpreadDelay) {
			return
		}
		// stop ends when the node stops or the gate moves: the graceful
		// stop. The term itself outlives it (WithTermContext) until lead
		// resigns, so its lease is renewed until the connection is gone.
		stop, cancel := context.WithCancelCause(ctx)
		guardDone := make(chan struct{})
		go func() {
			defer close(guardDone)
			if n.waitGate(stop, b.ID, rev, func(env string) bool { return env != n.cfg.Env }) {
				cancel(errGateMoved)
			}
		}()
		term, err := el.Campaign(stop, election.WithTermContext(context.WithoutCancel(stop)))
		var res leadResult
		if err == nil {
			res = n.lead(stop, term, b, log)
		}
		gateMoved := errors.Is(context.Cause(stop), errGateMoved)
		cancel(nil)
		<-guardDone

		switch {
		case ctx.Err() != nil:
			return
		case gateMoved:
			continue // the loop finds the bot gated
		case err != nil: // the etcd client is closed
			n.etcdError("campaign")
			wait(&etcdRetry, "campaign failed: "+err.Error())
			continue
		case res.kicked && n.kicked(ctx, b.ID, &res, &kicks, &humanWait, log):
			continue // needs_human: waited
		case res.authFailed:
			n.setState(b.ID, StateNeedsHuman, res.reason, 0)
			if h := n.cfg.Health; h != nil {
				log.Error().Str("reason", res.reason).
					Msg("bot needs a human: WeCom refused its credentials; not retrying until its incident is acknowledged (botctl incidents ack)")
				if h.AuthHold(ctx, b.ID) {
					continue
				}
			}
			log.Error().Str("reason", res.reason).Dur("retry_in", authWait).
				Msg("bot needs a human: WeCom refused its credentials; fix the secret (retrying will not help)")
			pause.For(ctx, authWait)
			authWait = min(2*authWait, n.cfg.AuthBackoffMax)
			continue
		}
		if res.connected {
			authWait = n.cfg.AuthBackoff
			if res.held >= n.cfg.StableTerm {
				retry.reset()
				if !res.kicked {
					kicks.reset()
					humanWait = n.cfg.AuthBackoff
				}
				if !res.kicked {
					continue // a blip after a stable term: campaign at once
				}
			}
		}
		// Not a stable connection (or kicked): never a tight loop. The term
		// is resigned already, so another node may try meanwhile.
		wait(&retry, res.reason)
	}
}

type leadResult struct {
	connected  bool
	authFailed bool
	kicked     bool
	held       time.Duration // how long the connection lasted
	reason     string
	term       int64      // the term's revision
	kickOrigin kickOrigin // who kicked, if kicked
	kickDetail string     // the evidence kickOrigin was decided on
}

// lead is one term: verify, connect, wait for the end, close, drain,
// resign. The connection is closed and gone, and what it delivered
// drained, before the term is resigned. stop ending is a graceful stop (see
// the package comment); the term ending is lost leadership.
func (n *Node) lead(stop context.Context, term *election.Term, b config.Bot, log zerolog.Logger) (res leadResult) {
	log = log.With().Int64("term", term.Rev).Logger()
	res.term = term.Rev
	n.setState(b.ID, StateConnecting, "", term.Rev)
	n.transition(b.ID, "leading", "", term.Rev)
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), ResignTimeout)
		defer cancel()
		if err := term.Resign(rctx); err != nil {
			log.Warn().Err(err).Msg("resign failed")
		}
		n.transition(b.ID, "resigned", res.reason, term.Rev)
	}()

	// Verify and dial end with the term or the stop, whichever is first.
	dctx, cancelDial := context.WithCancel(term.Context())
	defer cancelDial()
	defer context.AfterFunc(stop, cancelDial)()

	// A linearizable read right before connecting: a node that was paused
	// or partitioned and lost leadership finds out here and never connects.
	vctx, cancel := context.WithTimeout(dctx, 5*time.Second)
	err := term.Verify(vctx)
	cancel()
	if errors.Is(err, election.ErrLegacyLeader) {
		// A rolling upgrade: a node of an older botctl holds the bot in
		// the old layout, which it alone sees. It keeps the bot until it
		// stops; this node resigns and backs off meanwhile.
		res.reason = "an older botctl node holds the bot (old election layout); waiting for it to stop: " + err.Error()
		log.Warn().Err(err).Msg("won the election but an old-layout leader holds the bot; not connecting")
		return res
	}
	if err != nil {
		res.reason = "leadership not confirmed: " + err.Error()
		log.Warn().Err(err).Msg("won the election but could not confirm it; not connecting")
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
	conn, err := wecom.Dial(dctx, wc, n.handlers(term))
	if h != nil {
		h.Dialed(term, conn, err)
	}
	if err != nil {
		res.reason = err.Error()
		if errors.Is(err, wecom.ErrAuthFailed) {
			res.authFailed = true
			n.transition(b.ID, "auth_failed", err.Error(), term.Rev)
		} else {
			log.Warn().Err(err).Msg("connect failed")
		}
		return res
	}
	connected := time.Now()
	res.connected = true
	n.setState(b.ID, StateLeader, "", term.Rev)
	n.transition(b.ID, "connected", "", term.Rev)
	log.Info().Msg("leading: WeCom connection up")

	leadCtx, stopLeading := context.WithCancel(term.Context())
	defer stopLeading()
	leadingDone := make(chan struct{})
	go func() {
		defer close(leadingDone)
		if n.cfg.Leading != nil {
			n.cfg.Leading(leadCtx, term, conn)
		}
	}()
	select {
	case <-conn.Done():
	case <-term.Done():
		// Leadership lost or in doubt. No lock, no identity: close at once.
		conn.Close()
	case <-stop.Done():
		// A graceful stop: the term is still ours and renewed until we
		// resign. Let Leading finish its writes in flight on the open
		// connection (each bounded by the ack timeout), then close; but
		// losing the term meanwhile closes at once.
		log.Info().AnErr("why", context.Cause(stop)).Msg("stopping gracefully: draining before resigning")
		stopLeading()
		select {
		case <-leadingDone:
		case <-term.Done():
		case <-conn.Done():
		}
		conn.Close()
	}
	// The connection's end is its event, not Close returning.
	<-conn.Done()
	if h != nil {
		h.Ended(term, conn, conn.Reason() == wecom.ReasonClosedByUs && term.Err() == nil)
	}
	stopLeading()
	<-leadingDone
	res.held = time.Since(connected)
	switch conn.Reason() {
	case wecom.ReasonClosedByUs:
		if err := term.Err(); err != nil {
			res.reason = "term ended: " + err.Error()
		} else {
			res.reason = "stopped: " + context.Cause(stop).Error()
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

// drain waits for Config.Drain, bounded by DrainTimeout: the callbacks the
// term's closed connection delivered are handled before the term is
// resigned, and before the next term's handlers can start.
func (n *Node) drain(term *election.Term, log zerolog.Logger) {
	if n.cfg.Drain == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.DrainTimeout)
	defer cancel()
	start := time.Now()
	n.cfg.Drain(ctx, term)
	if ctx.Err() != nil {
		log.Warn().Dur("drain_timeout", n.cfg.DrainTimeout).
			Msg("inbound handlers still running at the drain deadline; resigning anyway (gap backfill recovers what they did not finish)")
		return
	}
	log.Debug().Dur("took", time.Since(start)).Msg("inbound drained")
}

func (n *Node) handlers(term *election.Term) wecom.Handler {
	return termInbound{in: n.cfg.Inbound, term: term, log: n.log}
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

// transition records a leadership change in etcd (best effort: it is for
// operators, and must not hold up a failover).
//
// It is written off the loop (its time is taken now, and transitions are
// keyed by it, so they keep their order): the "leading" record at term
// start does not delay Verify and Dial by an etcd round trip.
func (n *Node) transition(bot, event, reason string, term int64) {
	tr := Transition{At: time.Now().UTC(), Bot: bot, Node: n.cfg.NodeID, Event: event, Reason: reason, Term: term}
	n.records.Go(func() { n.record(tr) })
}

// transitionNow is transition written before it returns: for records the
// loop reads back at once (the cluster's foreign kicks are counted from
// them).
func (n *Node) transitionNow(bot, event, reason string, term int64) {
	n.record(Transition{At: time.Now().UTC(), Bot: bot, Node: n.cfg.NodeID, Event: event, Reason: reason, Term: term})
}

func (n *Node) record(tr Transition) {
	ctx, cancel := context.WithTimeout(context.Background(), TransitionTimeout)
	defer cancel()
	if err := recordTransition(ctx, n.cli, n.cfg.Prefix, tr); err != nil {
		n.etcdError("transition")
		n.log.Debug().Err(err).Str("bot", tr.Bot).Msg("record transition failed")
	}
}

// claimGate is ClaimGate plus the revision to watch from.
func claimGate(ctx context.Context, cli *clientv3.Client, prefix, bot, env string) (string, int64, error) {
	key := prefix + gateDir + bot
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, env)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return "", 0, fmt.Errorf("claim env gate of bot %s: %w", bot, err)
	}
	if resp.Succeeded {
		return env, resp.Header.Revision, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return "", 0, errors.New("env gate vanished while claiming")
	}
	return string(kvs[0].Value), resp.Header.Revision, nil
}

// waitGate watches the bot's gate from after rev until changed(env) holds
// for a new value ("" when deleted), and reports whether it did (false: ctx
// ended first).
func (n *Node) waitGate(ctx context.Context, bot string, rev int64, changed func(env string) bool) bool {
	key := n.cfg.Prefix + gateDir + bot
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range n.cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
			if wr.Err() != nil {
				if wctx.Err() == nil {
					n.etcdError("gate")
				}
				break
			}
			for _, ev := range wr.Events {
				rev = ev.Kv.ModRevision
				env := string(ev.Kv.Value)
				if ev.Type == mvccpb.DELETE {
					env = ""
				}
				if changed(env) {
					cancel()
					return true
				}
			}
		}
		cancel()
		pause.For(ctx, time.Second)
	}
	return false
}
