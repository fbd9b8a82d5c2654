package node

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/retry"
)

// botLoop is one bot's life on this node, until ctx ends.
func (n *Node) botLoop(ctx context.Context, index int, b config.Bot, sig balanceSignals) {
	log := n.log.With().Str("bot", b.ID).Logger()
	el, err := election.New(n.cli, n.electionConfig(b.ID))
	if err != nil { // validated in New; unreachable
		log.Error().Err(err).Msg("election config")
		return
	}
	defer n.setState(b.ID, StateStopped, "node stopping", 0)
	// termRetry paces terms that did not give a stable connection; etcdRetry
	// paces the loop's own etcd errors, and resets once etcd answers.
	termRetry, etcdRetry := retry.New(n.cfg.Backoff, n.cfg.BackoffMax), retry.New(n.cfg.Backoff, n.cfg.BackoffMax)
	authWait := retry.New(n.cfg.AuthBackoff, n.cfg.AuthBackoffMax)
	kicks, humanWait := foreignKicks{limit: n.cfg.KickLimit, window: n.cfg.KickWindow}, retry.New(n.cfg.AuthBackoff, n.cfg.AuthBackoffMax)
	wait := func(bo *retry.Backoff, reason string) {
		d := bo.Next()
		n.setState(b.ID, StateBackoff, reason, 0)
		log.Info().Str("reason", reason).Dur("retry_in", d).Msg("backing off before campaigning again")
		pause.For(ctx, d)
	}
	// At start, campaign for the node's bots one spread step apart, so
	// nodes that start together do not each race for every bot at once.
	if !pause.For(ctx, time.Duration(index)*n.spreadStep()) {
		return
	}
	for ctx.Err() == nil {
		gate, rev, err := claimGate(ctx, n.cli, n.cfg.Prefix, b.ID, n.cfg.Env)
		if err != nil {
			if ctx.Err() == nil {
				n.etcdError("gate")
				log.Warn().Err(err).Msg("env gate unreadable; retrying")
				wait(etcdRetry, "env gate unreadable: "+err.Error())
			}
			continue
		}
		etcdRetry.Reset()
		if gate != n.cfg.Env {
			n.setState(b.ID, StateGated, gatedReason(b.ID, gate, n.cfg.Env), 0)
			log.Info().Str("gate", gate).Str("env", n.cfg.Env).Str("reason", gatedReason(b.ID, gate, n.cfg.Env)).Msg("bot gated to another env; not campaigning")
			n.waitGate(ctx, b.ID, rev, func(env string) bool { return env != gate })
			continue
		}

		if why, off := n.clockOff(); off {
			if n.state(b.ID) != StateClockOff {
				log.Error().Str("reason", why).Msg("not campaigning: this node's clock is off")
				n.setState(b.ID, StateClockOff, why, 0)
			}
			pause.For(ctx, clockRecheck)
			continue
		}
		n.setState(b.ID, StateStandby, "", 0)
		if k := n.leading(); k > 0 && !pause.For(ctx, time.Duration(k)*n.spreadStep()) {
			return
		}
		// stop ends when the node stops, or watchStop ends it: the graceful
		// stop. The term outlives it (WithTermContext) until lead resigns.
		stop, cancel := context.WithCancelCause(ctx)
		watched := n.watchStop(stop, cancel, b.ID, rev, sig)
		term, err := n.campaign(stop, el, sig.stepBack, log)
		var res leadResult
		if err == nil {
			res = n.lead(stop, term, n.served(b), log)
		}
		gateMoved := errors.Is(context.Cause(stop), errGateMoved)
		clockOff := errors.Is(context.Cause(stop), errClockOff)
		handedOver := errors.Is(context.Cause(stop), errHandover)
		cancel(nil)
		watched.Wait()

		switch {
		case ctx.Err() != nil:
			return
		case gateMoved:
			continue // the loop finds the bot gated
		case clockOff:
			log.Error().Msg("this node's clock went off: candidacy or term ended")
			continue // the loop finds the clock off
		case handedOver && err == nil:
			log.Info().Str("reason", res.reason).Msg("handed over by the balancer: campaigning again, at the back of the queue")
			continue
		case err != nil: // the etcd client is closed
			n.etcdError("campaign")
			wait(etcdRetry, "campaign failed: "+err.Error())
			continue
		case res.kicked && n.kicked(ctx, b.ID, &res, &kicks, humanWait, log):
			continue // needs_human: waited
		case res.authFailed:
			n.setState(b.ID, StateNeedsHuman, res.reason, 0)
			wait := authWait.Next()
			if h := n.cfg.Health; h != nil {
				log.Error().Str("reason", res.reason).Dur("retry_in", wait).
					Msg("bot needs a human: WeCom refused its credentials; retrying when its incident is acknowledged (botctl incidents ack) or after the backoff")
				if h.AuthHold(ctx, b.ID, wait) {
					continue
				}
			}
			log.Error().Str("reason", res.reason).Dur("retry_in", wait).
				Msg("bot needs a human: WeCom refused its credentials; fix the secret (retrying will not help)")
			pause.For(ctx, wait)
			continue
		}
		if res.connected {
			authWait.Reset()
			if res.held >= n.cfg.StableTerm {
				termRetry.Reset()
				if !res.kicked {
					kicks.reset()
					humanWait.Reset()
				}
				if !res.kicked {
					continue // a blip after a stable term: campaign at once
				}
			}
		}
		// Not a stable connection (or kicked): never a tight loop. The term
		// is resigned already, so another node may try meanwhile.
		wait(termRetry, res.reason)
	}
}

// watchStop ends stop (cancel, with the cause) when the bot's gate moves
// from this node's env (errGateMoved, rev: the gate's revision read),
// this node's clock goes off (a candidacy, or a term, of a node whose
// clock cannot be trusted ends: errClockOff) or the balancer orders the
// bot handed over while this node leads it (errHandover). Orders the
// balancer gave before are dropped first. The returned group is done
// once stop has ended and every watcher returned.
func (n *Node) watchStop(stop context.Context, cancel context.CancelCauseFunc, bot string, rev int64, sig balanceSignals) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		if n.waitGate(stop, bot, rev, func(env string) bool { return env != n.cfg.Env }) {
			cancel(errGateMoved)
		}
	})
	wg.Go(func() {
		if n.waitClockOff(stop) {
			cancel(errClockOff)
		}
	})
	sig.drain()
	wg.Go(func() { n.watchHandover(stop, cancel, bot, sig) })
	return &wg
}
