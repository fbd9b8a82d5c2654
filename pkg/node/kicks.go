package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/retry"
	"github.com/rs/zerolog"
)

// Kicks. WeCom closes a bot's older connection when a newer one subscribes
// (newest wins), and tells the older one (disconnected_event): a kick.
// Inside the cluster a kick is expected only when this node lost its term
// (a standby deposed it, or its lease expired) and the new leader
// connected before this node noticed; its term is then gone. A kick while
// this node's term is still its own, confirmed by Verify, came from a
// connection outside the cluster: something else holds the bot's
// credentials (a second environment with the same secret, a process left
// over from an old deployment). Reconnecting would kick it in turn, so the
// two would ping-pong; after KickLimit such kicks within KickWindow the bot
// is marked needs_human with a reason that says what to do, and retried
// only after the long AuthBackoff (doubling to AuthBackoffMax).

// kickOrigin says who kicked a term's connection.
type kickOrigin int

const (
	kickUnknown kickOrigin = iota // etcd could not be asked
	kickCluster                   // the term was lost: a node of this cluster took over
	kickForeign                   // the term was still ours: a connection outside the cluster
)

// kickedBy classifies a kick of term's connection with one linearizable
// read (Verify): if the term's key is still its own, no node of this
// cluster can have connected, so the kicker is outside.
func (n *Node) kickedBy(term *election.Term) (kickOrigin, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := term.Verify(ctx)
	switch {
	case err == nil:
		return kickForeign, nil
	case errors.Is(err, election.ErrNotLeader):
		return kickCluster, err
	default:
		return kickUnknown, err
	}
}

// foreignKicks remembers the foreign kicks of one bot within the window.
type foreignKicks struct {
	limit  int
	window time.Duration
	at     []time.Time
}

// add records a kick at now and returns how many fall within the window.
func (k *foreignKicks) add(now time.Time) int {
	keep := k.at[:0]
	for _, t := range k.at {
		if now.Sub(t) < k.window {
			keep = append(keep, t)
		}
	}
	k.at = append(keep, now)
	return len(k.at)
}

func (k *foreignKicks) reset() { k.at = k.at[:0] }

// kicked handles a term that ended in a kick: a foreign kick is recorded
// (leader event "foreign_kick", a warning naming the likely cause) and the
// reason says so; at the limit the bot is marked needs_human and the loop
// waits humanWait's next step. It reports whether it waited.
func (n *Node) kicked(ctx context.Context, bot string, res *leadResult, kicks *foreignKicks, humanWait *retry.Backoff, log zerolog.Logger) bool {
	switch res.kickOrigin {
	case kickCluster:
		res.reason = "kicked: a node of this cluster took over (this node's term had ended: " + res.kickDetail + ")"
		n.leaderEvent(bot, "kicked", res.reason, res.term)
		log.Info().Str("reason", res.reason).Msg("kicked by the new leader of this cluster")
		return false
	case kickUnknown:
		res.reason = "kicked; could not tell by whom (etcd did not answer: " + res.kickDetail + ")"
		n.leaderEvent(bot, "kicked", res.reason, res.term)
		log.Warn().Str("reason", res.reason).Msg("kicked")
		return false
	}
	local := kicks.add(time.Now())
	n.leaderEventNow(bot, "foreign_kick", fmt.Sprintf("kicked by a WeCom connection outside this cluster while this node held the bot's election "+
		"(%d time(s) on this node in %s)", local, kicks.window), res.term)
	// Counted over the cluster (the foreign_kick leader events in etcd), so
	// that the standbys do not each start from zero when this node steps
	// aside; this node's own count if etcd cannot be read.
	count := max(local, n.clusterForeignKicks(ctx, bot, kicks.window))
	what := fmt.Sprintf("kicked %d time(s) in %s by a WeCom connection outside this cluster while a node of it held the bot's election: "+
		"another holder of bot %s's credentials is connecting (a second environment using the same bot secret, or a leftover process)", count, kicks.window, bot)
	if count < kicks.limit {
		res.reason = what
		log.Warn().Int("kicks", count).Int("limit", kicks.limit).Dur("window", kicks.window).
			Msg("kicked by a connection outside this cluster: another environment or process uses this bot's credentials")
		return false
	}
	wait := humanWait.Next()
	reason := what + fmt.Sprintf("; stopped reconnecting (kick_limit %d): stop the other holder or give it its own bot, "+
		"then restart this node or wait for the retry in %s", kicks.limit, wait.Round(time.Second))
	n.setState(bot, StateNeedsHuman, reason, 0)
	n.leaderEvent(bot, "needs_human", reason, res.term)
	log.Error().Str("reason", reason).Dur("retry_in", wait).
		Msg("bot needs a human: a second holder of its credentials keeps kicking this cluster's connection (retrying would ping-pong)")
	if h := n.cfg.Health; h != nil {
		h.Conflict(bot, reason)
	}
	pause.For(ctx, wait)
	// The kicks are kept: after the wait, one more foreign kick within
	// the window escalates again (one kick per retry, not KickLimit).
	return true
}

// kickOf is kickedBy with its evidence as text.
func (n *Node) kickOf(term *election.Term) (kickOrigin, string) {
	origin, err := n.kickedBy(term)
	if err != nil {
		return origin, err.Error()
	}
	return origin, "Verify confirmed this node's term"
}

// clusterForeignKicks counts bot's foreign_kick leader events of the last
// window, recorded by any node; 0 if they cannot be read.
func (n *Node) clusterForeignKicks(ctx context.Context, bot string, window time.Duration) int {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	trs, err := LeaderEvents(ctx, n.cli, n.cfg.Prefix, bot, MaxLeaderEvents)
	if err != nil {
		return 0
	}
	count := 0
	for _, tr := range trs {
		if tr.Event == "foreign_kick" && time.Since(tr.At) < window {
			count++
		}
	}
	return count
}
