// Package wecomsim is a WeCom AI-bot long-connection server that is as strict
// as the real one: it stands in for WeCom in tests, benchmarks and demos.
//
// It speaks the protocol described in docs/wecom-protocol.md on a
// WebSocket at "/" and offers a JSON control API under "/control/" to play
// the users' side (post messages and events), to inject faults (drop,
// revoke, stall or late acks, silence, refused subscribe, lost
// subscription, a chat whose device shows no streams), to set what a frame
// over the quota gets (refused with 45009, or dropped silently) and to read what the users would see
// (transcripts), what the bots did (stats) and what they were sent (history).
// It also serves WeCom's message history as the bots reach it: the "msg" MCP
// server a bot's connection names (aibot_get_mcp_config), authorized per bot
// and scoped to the bot's conversations or an authorizing member's (mcp.go,
// mcpmsg.go).
//
// Guarantees:
//   - every rule the simulator knows is enforced on every frame and counted
//     in Stats; a rejected (or, in drop mode, dropped) frame changes nothing
//     the user sees and does not consume quota;
//   - the quota is WeCom's two caps per conversation, a minute's and an
//     hour's, shared by every reply and push; uploads have their own;
//   - one connection per bot: a new subscribe kicks the old connection with
//     disconnected_event, as WeCom does;
//   - a malformed frame is answered with an error ack (or closes only the
//     connection that sent it) and never blocks other bots;
//   - Close ends every goroutine the server started.
//
// It does not guarantee WeCom's exact numbers where they are unknown: values
// the protocol notes mark "assumed" (stream window, quota, errcodes from
// package wecom) are Config fields, and bots must not depend on them.
//
// Every time window (stream, quota, welcome, update, faults) is measured with
// Config.Now, so tests can inject a clock or shorten the windows.
package wecomsim
