// Package alert tells people about incidents (pkg/heal/incident): it watches
// the incidents bucket, decides which alerts the incidents call for, and
// sends them to sinks (a WeCom group robot, a JSON webhook). One node of
// the cluster runs it (RunElected).
//
// Two levels, decided by whether a person must act: auto (botctl is
// fixing it; nobody is paged) and human. Human at once for a rejected
// secret, an env-gate conflict, a delivery failed for good, an incomplete
// backfill (NeedsHuman), and for an automatic recovery still failing
// after Config.EscalateAfter (an escalated alert).
//
// The rules (decide), all a function of the incidents and of the alerts
// they record, so that a new alerter rebuilds its state from the bucket:
//
//   - One alert per incident when it opens and one when it recovers
//     (Recovered set, or closed); at most one of each kind per incident.
//     An auto incident that recovered before its open alert was due
//     (healed within the merge window) sends nothing at all.
//   - Each sink receives the levels it subscribes to (Subscribe); the
//     synthetic alert reaches every sink.
//   - Auto incidents wait up to Config.Window: MergeMin or more bots down
//     within it become one merged alert, raised to human, naming the
//     likely common cause. Human incidents never wait (those decided
//     together merge too).
//   - Flapping: after a bot's open alert, its further auto incidents
//     within Config.FlapWindow are folded into one flapping summary at
//     the window's end; per bot and window that is at most an open, its
//     recovery and a summary. Escalation still applies to folded ones.
//   - A synthetic alert runs the whole path every Config.Synthetic; its
//     time is recorded (SyntheticKey) so a failover does not resend it.
//
// What it guarantees: an alert is recorded in each of its incidents
// (incident.Sent, a compare-and-set that fails if the kind is there
// already) before it is queued, so neither a restarted alerter nor two
// alerters running at once (leadership is not fencing: an old leader cut
// off from etcd runs for up to its session TTL) send it twice. Alerts
// reach each sink in the order they were raised.
//
// What it does not guarantee: delivery. It is at most once: an alerter
// that dies between recording and sending, a sink that refuses an alert
// or fails Config.MaxAttempts times, a full queue, lose that alert
// (logged and counted in Stats). The synthetic alert lets the receiving
// side notice a silent alert path (docs/alerts.md, dead man's switch).
// Time rules are checked every Config.Tick against Config.Now, so an
// alert may be up to a Tick late.
package alert
