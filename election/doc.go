// Package election picks, per bot, the single botctl node that may hold the
// bot's WeCom connection, using a lease-bound key in etcd.
//
// # How it works
//
// Each bot has one election key, Prefix+BotID. A node campaigns by granting
// a fresh lease and creating the key bound to it in one transaction that
// succeeds only if the key does not exist. The winner's Term lasts while the
// node renews the lease; losers watch the key and try again when it is
// deleted (resignation, lease expiry, or an operator). Acquire, renew and
// release are each one owner-checked etcd operation: the create is
// conditional, renewal is a keep-alive of our own lease, and Resign revokes
// our lease, which deletes the key only if it is still bound to that lease.
//
// The key's value is JSON, {"node":"n1","since":"2026-01-02T15:04:05Z"}: the
// leading node and the wall-clock time its term began (Leader reads it; a
// plain node id is read as such). The key's CreateRevision is the term's
// revision, Term.Rev: it identifies one term of one node.
//
// # What is guaranteed
//
// A Term's context is cancelled, and the leader must stop acting, at the
// first of: the lease can no longer be renewed for RenewDeadline after the
// send time of its last successful renewal; etcd reports the lease gone; the
// key is deleted or bound to another lease; Resign or End; the term's parent
// context ends (the context given to Campaign, or the one given to
// WithTermContext). Because etcd expires a lease no sooner than TTL after
// the renewal request that the server accepted, and RenewDeadline is at most
// TTL-SafetyMargin, the old leader's context is cancelled at least
// SafetyMargin before its lease can expire on the server, so before any
// other node can win. If the caller closes the WeCom connection when the
// context is done, the old connection is gone before a new leader connects.
//
// This holds only if (a) the leader's process is not paused (GC, SIGSTOP, a
// frozen VM) for longer than SafetyMargin between observing its context and
// acting, and (b) the clocks of the leader and the etcd leader advance at
// similar rates (skew in rate, not in absolute time; monotonic clocks are
// used). Raise SafetyMargin to tolerate longer pauses or worse clocks, at
// the cost of leaders stepping down earlier when etcd is slow.
//
// # Graceful stop
//
// Stopping on purpose (a deploy, the bot moved elsewhere) is not losing:
// the leader should finish what its connection already delivered, close the
// connection, and only then release the bot, with its lease renewed the
// whole time so that nothing can take over under an open connection.
// Campaign(stop, WithTermContext(context.WithoutCancel(stop))) gives that
// order: when stop ends, the Term is untouched (renewals, the watchdog and
// the key watch all keep running, so losing the lease meanwhile still
// cancels its context at once); the caller drains, closes, then calls
// Resign, which stops renewals and deletes the key in one call. The
// guarantees above hold throughout: a graceful stop only moves the moment
// the term ends from "stop requested" to "Resign".
//
// # What is not guaranteed
//
// This is not fencing. WeCom accepts no fencing token, so nothing stops a
// paused or partitioned old leader from acting after it has lost: a process
// stopped for longer than SafetyMargin resumes still believing it leads
// until its timer fires. Term.Verify narrows that window: it is a
// linearizable read of the election key, and callers must call it right
// before every connect and must not connect unless it returns nil. A node
// that finds the key gone or not its own never connects, so a stale node
// does not cause connection ping-pong: at worst it is kicked once by WeCom
// when the real leader connects.
//
// Campaigning is not fair (no queue of candidates) and a node that restarts
// while its old lease lives waits up to TTL for that lease to expire: it
// never reclaims a key it cannot prove is its own term's.
package election
