// Package backfill finds the user messages a bot missed and answers them.
//
// WeCom delivers a callback once, to the connection that holds the bot at
// that moment, and never again. A message sent while no node held the
// connection (a handover, an outage), one read by a leader that died
// before it was recorded, or one that existed only in the spool of a node
// that is gone, would be lost without a trace. Three things close that:
//
//   - the inbound Watermark: per bot, the create time of the latest message
//     the inbound path handled to the end (recorded in JetStream), written
//     every few seconds and never while the node's spool holds a task (a
//     spooled message is not durable in the cluster yet), nor while a
//     pass of the bot runs (Tracker.Hold: the missed messages it defers
//     must stay within the next term's pass, should this term end first).
//     During a JetStream outage it cannot be written at all, so it stays
//     before the outage;
//   - a pass at the start of every term (Run): the bot's history from the
//     watermark less Overlap up to the term's start is read from a
//     HistorySource; every message without a task record (the record is
//     the proof it was handled) is handed to the inbound path as a late
//     message, answered by proactive push with a note that it is late. The
//     task id is derived from the msgid, so a message found twice, or also
//     delivered by WeCom, is one task. The health monitor runs one again
//     after an incident, and counts what a silence missed (Missed);
//   - the history audit (Audit) for as long as a term lasts: every
//     AuditEvery the history since its last read, for a connection deaf
//     for less time than the silence alarm takes (no incident opens).
//
// A node runs all three through one Backfiller, bound to the store and
// the inbound path once JetStream answers.
//
// Two HistorySources: WeComHistory, WeCom's own message history (the
// "msg" MCP server each bot's connection names; production), and
// SimHistory, the simulator's history API (backfill.history_url).
//
// What is not covered: a gap WeCom's history cannot give (the bot's msg
// capability not authorized, a gap older than its 7 days, a history of an
// authorizing member's chats only) ends the pass at once with an error
// matching ErrNoHistory and saying which (ErrNotAuthorized,
// ErrNotCovered); without a HistorySource no pass runs. pkg/heal/health
// then marks the conversations active around an outage's gap "may be
// incomplete", pages a person for an outage, and writes the reason in the
// incident. A pass is
// bounded by MaxMessages; what is beyond it, or refused, is reported as not
// filled (Report.Unfilled): pkg/heal/health marks those conversations "may be
// incomplete", the next answer there tells the user, and a data incident
// pages a person. A message whose conversation is busy is deferred
// (ErrBusy) to a later pass, not counted as not filled.
package backfill
