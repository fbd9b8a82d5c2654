// Package node is a botctl node's life: it registers itself, and for every
// bot it campaigns in the bot's election, holds the bot's WeCom connection
// while it leads, and goes back to campaigning when the connection or the
// leadership ends.
//
// Per bot, one loop: check the env gate → campaign → verify leadership with
// a linearizable read → dial a fresh connection with fresh handlers → wait
// for the connection's end (by its Done event), the term's end or a stop →
// close the connection, wait for it to be gone → drain (TermHooks.Drain) →
// resign → back off if the term was not a stable connection → campaign
// again. A blip of a stable connection (keepTerm: the link, missed
// heartbeats or acks, the health monitor closing a sick link) is
// reconnected under the same term instead, after the drain, its lease
// still valid: resigning would queue this node behind every standby. A
// term's connection is always gone before the term is released (and
// before the term's next connection is dialed), so the next leader never
// overlaps with it, and handlers never stack up: each
// connection has its own, the next connection is dialed only after the
// previous one's Done, and the previous term's callbacks have been drained.
//
// # How a term ends
//
// Lost leadership (the term's context ends with election.ErrNotLeader):
// no lock, no identity. The connection is closed at once, then the node
// waits for it to be gone and for WorkOnConn and Drain to return, resigns,
// and campaigns again.
//
// Graceful stop (the node's context ends, or the bot's env gate moves to
// another env): the term stays ours and its lease stays renewed (the term
// is campaigned with election.WithTermContext) until the very end, in this
// order: WorkOnConn's context ends and it returns (the pusher finishes its
// writes in flight on the still-open connection); the connection is closed
// and its Done observed; Drain returns (every callback the connection
// delivered has been handled to the end); then the term is resigned, which
// stops renewals and releases the bot at once, so a standby takes over
// within one campaign round. If the term is lost at any point of this, the
// connection is closed at once as above.
//
// # Crash, restart and upgrade
//
// With Config.DataDir, each bot's election lease is kept in the data dir
// and revoked by the next run before it campaigns (see the election
// package): a node killed and restarted by systemd hands its bots to the
// standbys at once, not after the TTL. A node that is not restarted (or
// hangs, or whose machine is gone) is deposed by a standby once its
// liveness pulse stands still for the election's PulseTimeout (3s by
// default; the election package says why that is safe). While a node of the old election
// layout (an older botctl, during a rolling upgrade) holds a bot, Verify
// refuses and the node backs off with that reason in its state, never
// connecting over it.
//
// # The newer node first
//
// During a rolling upgrade a graceful handover goes to a node already on
// the newer build when one is waiting, so that a roll moves each bot once.
// The election queue is etcd's (first joined, first to lead), and nothing
// reorders it; instead a standby leaves it and joins again at the back
// when a live node of a newer build waits behind it (stepBack, decided on
// each change of the node registry or of the bot's queue). Newer is the
// registry entry's schema version ("v"; none: a release before versions),
// then its release version; two builds that are not releases (dev) are
// not ordered. What this guarantees:
//
//   - a leader is never moved by it: only a waiting candidate gives up
//     its place, and a term that Campaign handed over is kept whatever
//     was decided meanwhile (one won in that instant, before it was
//     handed over, is withdrawn before any connect, as any candidacy);
//   - a standby steps back at most once per newer node that joins behind
//     it, so the queue settles (the newest builds first) after one step
//     per older standby, with no ping-pong between two nodes;
//   - a step back is a candidacy ended and begun again (one lease and two
//     key writes); a node that cannot read the registry or the queue does
//     not step back.
//
// What it does not: a leader stopped while no newer node waits hands over
// to an older one (roll the standbys first and the leaders last, and the
// bot moves once); a node of a release before this rule (5071c48) keeps
// its place, so a queue with such a node ahead of a newer one settles only
// as those nodes are rolled.
//
// # Backoff
//
// Every way through the loop that is not a stable connection waits before
// campaigning again, exponentially with jitter (Config.Backoff): a failed
// verify, a refused or failing dial, a non-auth subscribe error, a
// connection that ended (or was kicked) before StableTerm, an unreadable env
// gate or a failed campaign. The node resigns before it waits, so another
// node may try meanwhile; each node backs off on its own, so a bot whose
// WeCom endpoint is down costs a few etcd writes per node per BackoffMax,
// not a hot loop. Kicked: something outside the cluster holds the bot's
// credentials, and reconnecting blindly would ping-pong with it, so a kick
// always waits. Auth failure (wecom.ErrAuthFailed, only for an
// authentication errcode at subscribe): the bot is marked needs_human and
// retried only after the long AuthBackoff; retrying a bad secret never
// helps.
//
// # Kicks and the env gate
//
// A kick while this node's term is still its own (Verify says so) came
// from outside the cluster: a second environment, or a leftover process,
// connecting with the same credentials. Each is logged as such and
// recorded (leader event "foreign_kick"); KickLimit of them within
// KickWindow mark the bot needs_human with a reason that says what to do,
// and the node then retries only after AuthBackoff (doubling), one kick per
// retry, instead of ping-ponging with the other holder every BackoffMax. A
// kick after this node lost its term (deposed by a standby, see the
// election package) is the cluster's own handover and does not count. A
// node whose env does not hold a bot's env gate does not campaign for it:
// its state is gated, with the gate's env and the command that moves it in
// the reason, and it logs the same once per gate change.
package node
