package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// errGateMoved ends a term whose bot's gate no longer names this node's env.
var errGateMoved = errors.New("env gate moved to another environment")

// botLoop is one bot's life on this node, until ctx ends.
func (n *Node) botLoop(ctx context.Context, index int, b config.Bot) {
	log := n.log.With().Str("bot", b.ID).Logger()
	el, err := election.New(n.cli, n.electionConfig(b.ID))
	if err != nil { // validated in New; unreachable
		log.Error().Err(err).Msg("election config")
		return
	}
	defer n.setState(b.ID, StateStopped, "node stopping", 0)
	kickWait, authWait := n.cfg.KickBackoff, n.cfg.AuthBackoff
	// At start, campaign for the node's bots one SpreadDelay apart, so
	// nodes that start together do not each race for every bot at once.
	if !sleep(ctx, time.Duration(index)*n.cfg.SpreadDelay) {
		return
	}
	for ctx.Err() == nil {
		gate, rev, err := claimGate(ctx, n.cli, n.cfg.Prefix, b.ID, n.cfg.Env)
		if err != nil {
			log.Warn().Err(err).Msg("env gate unreadable; retrying")
			sleep(ctx, time.Second)
			continue
		}
		if gate != n.cfg.Env {
			n.setState(b.ID, StateGated, fmt.Sprintf("env gate names %q, this node is %q", gate, n.cfg.Env), 0)
			log.Info().Str("gate", gate).Msg("bot gated to another env; not campaigning")
			n.waitGate(ctx, b.ID, rev, func(env string) bool { return env != gate })
			continue
		}

		n.setState(b.ID, StateStandby, "", 0)
		if k := n.leading(); k > 0 && !sleep(ctx, time.Duration(k)*n.cfg.SpreadDelay) {
			return
		}
		gctx, cancel := context.WithCancelCause(ctx)
		guardDone := make(chan struct{})
		go func() {
			defer close(guardDone)
			if n.waitGate(gctx, b.ID, rev, func(env string) bool { return env != n.cfg.Env }) {
				cancel(errGateMoved)
			}
		}()
		term, err := el.Campaign(gctx)
		var res leadResult
		if err == nil {
			res = n.lead(term, b, log)
		}
		cancel(nil)
		<-guardDone
		if err != nil {
			continue // ctx ended or the gate moved
		}

		switch {
		case res.authFailed:
			n.setState(b.ID, StateNeedsHuman, res.reason, 0)
			log.Error().Str("reason", res.reason).Dur("retry_in", authWait).
				Msg("bot needs a human: WeCom refused its credentials; fix the secret (retrying will not help)")
			sleep(ctx, authWait)
			authWait = min(2*authWait, n.cfg.AuthBackoffMax)
			continue
		case res.connected && res.held >= n.cfg.StableTerm:
			kickWait = n.cfg.KickBackoff
		}
		authWait = n.cfg.AuthBackoff
		if res.connected && (res.kicked || res.held < n.cfg.StableTerm) && ctx.Err() == nil {
			// A connection that keeps ending quickly (kicked by something
			// outside the cluster, or a flapping network) is retried ever
			// more slowly: never a tight reconnect loop.
			n.setState(b.ID, StateBackoff, res.reason, 0)
			sleep(ctx, kickWait)
			kickWait = min(2*kickWait, n.cfg.KickBackoffMax)
		}
	}
}

type leadResult struct {
	connected  bool
	authFailed bool
	kicked     bool
	held       time.Duration // how long the connection lasted
	reason     string
}

// lead is one term: verify, connect, wait for the end, close, resign. The
// connection is closed and gone before the term is resigned.
func (n *Node) lead(term *election.Term, b config.Bot, log zerolog.Logger) (res leadResult) {
	log = log.With().Int64("term", term.Rev).Logger()
	n.setState(b.ID, StateConnecting, "", term.Rev)
	n.transition(b.ID, "leading", "", term.Rev)
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := term.Resign(rctx); err != nil {
			log.Warn().Err(err).Msg("resign failed")
		}
		n.transition(b.ID, "resigned", res.reason, term.Rev)
	}()

	// A linearizable read right before connecting: a node that was paused
	// or partitioned and lost leadership finds out here and never connects.
	vctx, cancel := context.WithTimeout(term.Context(), 5*time.Second)
	err := term.Verify(vctx)
	cancel()
	if err != nil {
		res.reason = "leadership not confirmed: " + err.Error()
		log.Warn().Err(err).Msg("won the election but could not confirm it; not connecting")
		return res
	}

	wc := n.cfg.WeCom
	wc.BotID, wc.Secret, wc.Logger = b.ID, b.Secret, log
	conn, err := wecom.Dial(term.Context(), wc, n.handlers(term))
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
		if errors.Is(context.Cause(term.Context()), election.ErrNotLeader) {
			// Leadership lost or in doubt. No lock, no identity: close at
			// once, and wait for the connection to be gone before the term
			// is released.
			conn.Close()
			<-conn.Done()
			break
		}
		// A graceful stop (SIGTERM): the term is still ours until we
		// resign, so let the writes in flight finish (each bounded by
		// the ack timeout), then close.
		stopLeading()
		<-leadingDone
		conn.Close()
		<-conn.Done()
	}
	stopLeading()
	<-leadingDone
	res.held = time.Since(connected)
	n.setState(b.ID, StateStandby, "connection ended; resigning", 0)
	switch conn.Reason() {
	case wecom.ReasonClosedByUs:
		res.reason = "term ended: " + context.Cause(term.Context()).Error()
	case wecom.ReasonKicked:
		res.kicked = true
		res.reason = "kicked: another connection subscribed with this bot"
	default:
		res.reason = conn.Err().Error()
	}
	log.Info().Str("reason", res.reason).Dur("held", res.held).Msg("connection ended")
	return res
}

func (n *Node) handlers(term *election.Term) wecom.Handlers {
	in := n.cfg.Inbound
	if in == nil {
		return wecom.Handlers{OnMessage: func(_ *wecom.Conn, reqID string, m *wecom.MsgCallback) {
			n.log.Warn().Str("bot", term.Bot).Str("msgid", m.MsgID).Msg("no inbound handler; message dropped")
		}}
	}
	return wecom.Handlers{
		OnMessage: func(c *wecom.Conn, reqID string, m *wecom.MsgCallback) { in.HandleMessage(term, c, reqID, m) },
		OnEvent:   func(c *wecom.Conn, reqID string, ev *wecom.EventCallback) { in.HandleEvent(term, c, reqID, ev) },
	}
}

// transition records a leadership change in etcd (best effort: it is for
// operators, and must not hold up a failover).
func (n *Node) transition(bot, event, reason string, term int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	tr := Transition{At: time.Now().UTC(), Bot: bot, Node: n.cfg.NodeID, Event: event, Reason: reason, Term: term}
	if err := recordTransition(ctx, n.cli, n.cfg.Prefix, tr); err != nil {
		n.log.Debug().Err(err).Str("bot", bot).Msg("record transition failed")
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
		sleep(ctx, time.Second)
	}
	return false
}
