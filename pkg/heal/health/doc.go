// Package health notices when a bot (an "instance") is not fine, opens and
// carries its incident, and brings it back: detection, the shared health
// record, half-open recovery and compensation, with every time measured.
//
// # Three signals, one record
//
// Every node runs a Health; the node leading a bot runs a monitor on its
// connection. Three signals write the bot's one health Record (JetStream
// KV, shared by every node):
//
//   - probe: the connection's heartbeat acks (the first late one is
//     probed at once), and Probe (one ping now, asked when another signal
//     looks wrong, instead of pinging every bot more often), and the
//     connection's own end (read error, kick, 846609);
//   - outbound failures: frames refused, timed out, or acked late;
//   - event silence: no callback for longer than the bot's hour-of-week
//     Baseline allows (no alarm until the baseline has data); and per
//     route: a group silent for longer than its own baseline allows while
//     the bot's other chats still deliver (a server that stopped one
//     route) is resubscribed once on a fresh connection, then paged.
//
// They cross-check through the record: a silence while an outbound frame
// was acked seconds ago (Config.Refute) is a baseline problem, recorded as
// such (Record.BaselineNote), not an incident; a silence with no recent
// outbound success gets a probe: no ack means a dead link (closed, and
// reconnected by the election loop at once), an ack means a deaf one (the
// server no longer delivers: reconnected once per incident). A link that
// dies without a FIN is so found within about Config.ProbeEvery of the
// first frame that fails (on an idle bot, the heartbeat whose ack is
// late), or of the silence threshold, instead of after two missed 30 s
// pings.
//
// # Incidents
//
// A failure opens the bot's incident (pkg/heal/incident) with the time of the
// last evidence that the bot was fine (Dropped) and the time it was
// detected; the first reconnect attempt, or a person's ack, is its first
// action; the next connection is its recovery; and it closes when its data
// is complete: the complete answers owed when it came back were delivered
// (outbound replay, each once: the task record says what the user saw) and
// the gap backfill of the inbound side ran (what it could not fill marks
// the conversation "may be incomplete", told to the user in the next reply,
// and opens a data incident for a person; with no history source to fill
// from, the conversations active around the gap are marked, and an outage
// of at least Recovery.Threshold pages a person). A graceful handover (a deploy)
// says so in the record and is not an incident; a leader that vanished
// without a word (kill -9, a partition) is found by the next leader, which
// opens the incident as it takes over.
//
// Rejected credentials are the one thing retrying rarely fixes: the
// incident is at level human and the node does not campaign for that bot
// again until a person acknowledges the incident (botctl incidents ack),
// or a long backoff has passed (AuthBackoff doubling to AuthBackoffMax,
// so that a refusal of seconds does not hold the bot until a person acts).
//
// The node's election loop never waits for any of this: its hooks post
// events to a per-bot queue, handled in order off the loop.
package health
