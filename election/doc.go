// Package election picks, per bot, the single botctl node that may hold the
// bot's WeCom connection, with etcd's concurrency.Election.
//
// # How it works
//
// Each bot has one election, the concurrency.Election named Prefix+BotID
// (default "/botctl/elect/<bot>"). A node campaigns by opening a
// concurrency.Session (a lease of TTL, default 20s, kept alive by the
// session) and joining the election: its candidate key,
// "/botctl/elect/<bot>/<lease id in hex>", is created bound to the lease,
// and the candidate whose key was created first leads. Candidates are
// served in the order they joined. This is etcd's own layout, so
//
//	etcdctl elect --listen /botctl/elect/<bot>
//	concurrency.NewElection(session, "/botctl/elect/<bot>").Leader(ctx)
//
// and Leader and Observe here all name exactly that bot's leader.
// Acquire, renew and release are each one owner-checked etcd operation: the
// candidate key is created only if absent, renewal is a keep-alive of our
// own lease, and Resign deletes our key only if its CreateRevision is still
// the term's (concurrency.Election's Resign), then revokes the lease.
//
// The leader's value is JSON, {"node":"n1","since":"2026-01-02T15:04:05Z"}:
// the leading node and the wall-clock time its term began, written with
// concurrency.Election's Proclaim on winning (a waiting candidate's value
// has no "since"; Leader reads a plain value as a node id). The key's
// CreateRevision is the term's revision, Term.Rev: it identifies one term
// of one node.
//
// # What is guaranteed
//
// A Term's context is cancelled, and the leader must stop acting, at the
// first of: the lease can no longer be renewed for RenewDeadline after the
// send time of its last successful renewal probe; etcd reports the lease
// gone; a per-bot pulse is refused (the key is no longer the term's); the session's keep-alive ends; the key is deleted or overwritten; a
// key of the old layout appears (below); Resign or End; the term's parent
// context ends (the context given to Campaign, or the one given to
// WithTermContext).
//
// The renewal probe is the term's own: every RenewInterval one
// KeepAliveOnce on the session's lease, whose send time is recorded, and
// one right after winning, before the Term is handed over. Because etcd
// expires a lease no sooner than TTL after a renewal request it accepted,
// and RenewDeadline is at most TTL-SafetyMargin, the old leader's context
// is cancelled at least SafetyMargin before its lease can expire on the
// server, so before any other node can win. The session's keep-alive runs
// alongside on its own stream; it can only push the expiry later, never
// earlier, so it does not weaken the bound (its send times are unknown,
// which is why the watchdog does not count from it). If the caller closes
// the WeCom connection when the context is done, the old connection is gone
// before a new leader connects.
//
// This holds only if (a) the leader's process is not paused (GC, SIGSTOP, a
// frozen VM) for longer than SafetyMargin between observing its context and
// acting, and (b) the clocks of the leader and the etcd leader advance at
// similar rates (skew in rate, not in absolute time; monotonic clocks are
// used). Raise SafetyMargin to tolerate longer pauses or worse clocks, at
// the cost of leaders stepping down earlier when etcd is slow.
//
// # Crash and restart
//
// With Config.LeaseFile set (pkg/node keeps one per bot in the node's data
// dir), the lease of each candidacy is written there before its key is
// created. Campaign first revokes the lease the file names, if it still
// exists and holds nothing but this bot's candidate key (and its pulse
// key, if it led) and that candidate key names this node (a copied data
// dir or a cloned VM, another node id, leaves the live leader alone):
// after kill -9, an
// OOM kill or a panic, the restarted process (systemd restarts it within
// seconds) ends its previous run's term, and the next candidate in the
// queue takes over at once instead of after the TTL. The lease stays 20s,
// so a slow etcd or a GC pause still does not cost leadership. A machine
// that is gone, or a process that hangs, is covered by the pulse (below).
//
// # Hung leaders: the liveness pulse
//
// A leader publishes a liveness pulse, of one of two kinds.
//
// The node pulse (Config.Batch; what pkg/node runs): a node's Batch
// writes one record, NodePulsePrefix+node (default
// "/botctl/nodepulse/<node>"), every PulseInterval (1s), holding for each
// term the node leads its revision and a counter. Only the term's own
// loop advances its counter (four times a PulseInterval); the Batch only
// copies the counters into the record. The pulse of a term is its counter
// moving in a record etcd accepted. A node that hangs (SIGSTOP, a frozen
// VM) stops its record, so every counter of its terms stands still; one
// term whose loop stops stops only its own counter, while the record
// goes on moving with the others: per-bot hang detection survives the
// batching. The cost is one etcd write a node per PulseInterval, whatever
// the bots it leads (a record of about 25 bytes a term;
// TestBatchWriteCost), and one watch event to each node, which all its
// standbys share. A term is handed to the caller only after a record
// holding it was accepted (written at once, coalesced with other new
// terms). Such a leader advertises "node_pulse_ms" in its election value.
//
// The per-bot pulse (an Elector without a Batch, and botctl 0.5.0): every
// PulseInterval one transaction "if my election key still has my term's
// CreateRevision, put PulsePrefix+BotID (default "/botctl/pulse/<bot>")
// bound to my lease". The key's ModRevision moving is the pulse: one etcd
// write a led bot a second (about 130 bytes; TestPulseWriteCost). Such a
// leader advertises "pulse_ms", and ends its term at once when a pulse is
// refused (its key is no longer its own).
//
// A standby reads either kind, whatever its own: while it waits in the
// queue it watches the leader's key and the leader's pulse (the per-bot
// key, or the leader's node record through one watch of every record its
// node shares). When the pulse has not moved for the larger of the
// leader's advertised timeout and its own PulseTimeout (3s by default),
// counted by its own clock from when it last saw the pulse move, it
// deposes the leader, but only on clean evidence (the decision is one
// pure rule, stall.go):
//
//  1. a linearizable read of the leader's key and the pulse: the term's
//     progress (the per-bot key's revision, or the term's counter in the
//     record) must be the one last seen (if it moved, this node's watch
//     lagged, not the leader: a slow standby does not depose), and the
//     leader's key must still be the same lease and revision;
//  2. that read must have answered within PulseInterval: a slower answer
//     says etcd (or this node) is slow, and the leader's pulses may be
//     late for the same reason; the window starts again;
//  3. the deposition is one transaction compared on exactly that evidence
//     (the key's CreateRevision and lease, and the ModRevision of the
//     pulse key or node record read) that deletes the leader's key. etcd
//     orders it after every pulse it accepted before it, however slowly
//     it commits them: a pulse that was sent in time and is merely slow to
//     commit makes the deposition fail (a node record written meanwhile
//     makes it fail too, and the standby reads again at once). Two
//     standbys deposing at once: one succeeds, the other's comparison
//     fails;
//  4. then the leader's lease is revoked (a per-bot pulse key goes with
//     it, and its renewals fail). The deposition is logged at warn level
//     with its evidence (leader, lease, term, pulse key and revision, the
//     counter, how long unseen, the read's round trip) and counted
//     (Elector.Depositions).
//
// A term of the node pulse learns it was deposed from its key watch (the
// key was deleted), Verify, or its next renewal (the lease is gone),
// since no compare ties the node's record to one term; its entry leaves
// the record when the term ends.
//
// Mixed versions (a rolling upgrade from 0.5.0): a standby of 0.5.0 knows
// only "pulse_ms" and the per-bot key, so a leader of the node pulse does
// not advertise "pulse_ms": 0.5.0's standbys never depose it (as any
// leader without a pulse; a hung one is then replaced by the new
// standbys, or after TTL), and never depose a healthy one for a pulse it
// does not write. A 0.5.0 leader advertises "pulse_ms" and writes its
// per-bot key, which the new standbys read: they depose it when it hangs.
//
// The next candidate in the queue then leads, as after a Resign: takeover
// about PulseTimeout after the hang (3s plus a campaign round; with the
// node pulse up to one PulseInterval more, since the record written after
// a term's loop stopped still carries its last advance), with the lease
// still 20s. A leader that advertises no pulse (NoPulse, or a node of
// a botctl without the pulse during a rolling upgrade) is never deposed.
//
// Why this is still safe. Deposition does not wait for the old leader to
// stop, so for a moment a deposed leader that is alive but paused may still
// hold its WeCom connection. It cannot keep it or get it back: it learns
// that it lost from the first of its key watch (the key was deleted), its
// next per-bot pulse (refused), its next renewal (the lease is gone) or
// the session's keep-alive; Verify (a linearizable read) refuses before every
// connect, and Check before every subscribe frame, so it never reconnects;
// and WeCom closes the older of two connections of a bot (newest wins), so
// the new leader's connection kicks the old one at most once. That is one
// kick per deposition, never a ping-pong. The same holds for a leader cut
// off from etcd but not from WeCom: the standbys depose it after
// PulseTimeout, before its own RenewDeadline ends its term: the
// partition costs one kick, and the bot is held by a node etcd can vouch
// for after about PulseTimeout instead of after TTL. What the pulse trades is false depositions: a leader
// paused for longer than PulseTimeout minus PulseInterval (2s by default;
// with the node pulse a quarter PulseInterval less, its counters' step)
// by GC, swap or a frozen VM is deposed though it would have recovered,
// and pays one kick and a reconnect. bench/failover.md measures them under
// a leader that is stopped for 1s at a time (0 expected: the longest gap
// between pulses is then about 2s); raise PulseTimeout if your pauses are
// longer.
//
// # A frozen member
//
// An etcd member that stops answering without closing its connections (a
// stopped process, a link that drops packets) while quorum holds must not
// cost a healthy leader its term. The client leaves such a member after
// its gRPC keepalive (about 15 s, pkg/config); until then the round-robin
// balancer still gives it every third request, and a renewal or pulse
// stuck there would use up the renewal deadline or the deposition window.
// So both are hedged (hedge.go): a probe or pulse unanswered after
// HedgeAfter (500 ms) is sent again beside the first, to another member;
// the first stays in flight, so an etcd that is only slow is not made
// busier than one extra request. A standby whose pulse watch sits on the
// frozen member sees the pulse stand still, but the linearizable read it
// confirms with (on another member, or failing) shows the pulse moved or
// errs, and it deposes nobody; its watch is re-established once the
// client leaves the member. TestFrozenMemberDeposesNobody freezes one
// member of three for 30 s.
//
// # Graceful stop
//
// Stopping on purpose (a deploy, the bot moved elsewhere) is not losing:
// the leader should finish what its connection already delivered, close the
// connection, and only then release the bot, with its lease renewed the
// whole time so that nothing can take over under an open connection.
// Campaign(stop, WithTermContext(context.WithoutCancel(stop))) gives that
// order: when stop ends, the Term is untouched (the probes, the session,
// the watchdog and the key watches all keep running, so losing the lease
// meanwhile still cancels its context at once); the caller drains, closes,
// then calls Resign, which stops renewals and deletes the key in one call.
// The guarantees above hold throughout: a graceful stop only moves the
// moment the term ends from "stop requested" to "Resign".
//
// # Rolling upgrade from the old layout
//
// botctl before this layout kept one key per bot, "/botctl/election/<bot>"
// (Config.LegacyPrefix), with its own transaction and keep-alive; old nodes
// see only that key, new nodes campaign under "/botctl/elect/". So that old
// and new nodes never both lead, a new node treats the old key as a leader
// it must yield to: Verify fails with ErrLegacyLeader while the key exists
// (it is read in the same linearizable transaction as the term's key), and
// a live term ends the moment the key appears (it is watched). An old node
// does not know of new ones and may still take a bot from a new leader:
// the new leader then closes its connection as soon as it sees the key (at
// worst one kick by WeCom), and never reconnects while the key exists.
// Upgrade node by node, as usual; a bot moves to the new layout when its
// old-layout leader stops (resigning deletes its key) or its lease expires.
// Once no old node runs, "/botctl/election/" stays empty. Rolling back is
// the same in reverse, but old nodes do not yield to new ones: stop new
// nodes before starting old ones.
//
// # Which candidate leads next
//
// The queue is served strictly in the order candidates joined; this
// package never reorders it. A caller that wants another order leaves and
// joins again: Campaign's context ending withdraws the candidacy (its key
// deleted with its lease), and the next Campaign joins at the back.
// Candidates lists the queue as it stands. pkg/node does exactly that to
// give a graceful handover to a node on a newer botctl during a rolling
// upgrade (pkg/node's "The newer node first"); every guarantee above holds
// throughout, since a withdrawal changes only the withdrawing candidate.
// The candidate values carry a schema version ("v", pkg/schema); a value
// without one (an older botctl) reads as before.
//
// # What is not guaranteed
//
// This is not fencing. WeCom accepts no fencing token, so nothing stops a
// paused or partitioned old leader from acting after it has lost: a process
// stopped for longer than SafetyMargin resumes still believing it leads
// until its timer fires. Term.Verify narrows that window: it is a
// linearizable read of the election key, and callers must call it right
// before every connect and must not connect unless it returns nil; and
// Term.Check (no read) right before the subscribe frame is written. A node
// that finds the key gone or not its own never connects, so a stale node
// does not cause connection ping-pong: at worst it is kicked once by WeCom
// when the real leader connects.
//
// A crashed leader is replaced at once if it restarts with its lease file,
// otherwise after about PulseTimeout (deposed by a standby), and after TTL
// only if no live standby runs the pulse or the leader advertises none.
// Deposition needs a standby that can reach etcd and sees the pulse stop;
// it is not fencing either (above).
// Two processes sharing one lease file would revoke each other's leases:
// every node needs its own data dir. A candidate's place in the queue is
// kept only while its session lives: a candidacy that fails (etcd
// unreachable for the TTL) joins again at the back. The queue has a cost
// the one-key layout did not: every standby holds a session (a lease kept
// alive, one keep-alive per bot per TTL/3), and a standby that dies
// without a restart keeps its place until its lease expires, so a leader
// change within TTL of that death waits for it (up to TTL) before the
// next live candidate leads.
package election
