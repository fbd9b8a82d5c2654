// Package wecom is the bot side of WeCom's AI bot long-connection protocol:
// the frame types, the errcodes, and a client (Conn) that subscribes,
// heartbeats, matches acks by req_id and serializes frames per req_id.
//
// The protocol as the real server speaks it is described in
// docs/wecom-protocol.md; values marked "assumed" there are
// settings here, and nothing in this package depends on their exact number.
//
// # What a send's result means
//
// WeCom's ack carries only the req_id, and frames of one req_id (a stream's
// progress and final frames) go one at a time, the next after the previous
// one's ack or ack timeout. So an ack that arrives after its frame timed out
// looks exactly like the ack of the next frame on that req_id. The official
// SDK credits it to the next frame; that can record a refused final frame as
// delivered. This client never does: it counts, per req_id, the frames whose
// ack is still owed. A frame sent while that count is zero gets its own ack
// and a definite answer (nil or an *AckError). A frame sent while an earlier
// one's ack is owed gets ErrAckUnknown when an ack comes, whatever that ack
// says, and the owed count stays right: the next ack is taken for the
// other frame. Once every owed ack has come, answers are definite again.
// If an owed ack never comes, every later frame of that req_id stays
// unknown until the connection ends (it ends after MaxAckTimeouts timeouts
// in a row, and a req_id does not survive a reconnect anyway). Unknown is
// safe but not an answer: the caller confirms another way, e.g. by
// delivering the final answer with a proactive push, which has a req_id of
// its own.
//
// # Whose error it is
//
// IsConnectionError splits errors into those about the connection (closed,
// ack timeout or unknown outcome, 846609 not subscribed, system busy,
// command conflict, the transient 846601/846602) and those about the frame
// itself (846605, 846608, 40008, 40058, 40060, 45009, 846604, and the
// client's own checks). Only the latter say anything about a task; a caller
// that counts delivery attempts counts only those. The connection acts on
// the former itself: 846609 on any ack (a ping's included) and
// MaxAckTimeouts frames in a row without an ack close it
// (ReasonNotSubscribed, ReasonAckTimeouts), so Done fires and the owner
// reconnects through the election rather than writing into a dead
// subscription.
//
// At subscribe, only an authentication errcode (IsAuthErrCode) is
// ErrAuthFailed, the "needs a human" case; any other refusal is
// ErrSubscribeRefused, retryable after a back-off.
//
// # Callbacks: bounded, never dropped once read
//
// Callbacks are not acked to WeCom, so one read from the socket and then
// dropped is lost. Every callback read is handed to the handlers exactly
// once, however the connection ends, and Done fires only after that. The
// reader never waits for a handler (acks and pings share the socket and
// would starve, and a handler waiting for its own reply's ack would
// deadlock), so back-pressure cannot reach WeCom; instead the queue is
// bounded by Config.CallbackQueue and, when it fills, the connection is
// closed (ReasonBacklog) after handing over what was read. What WeCom sent
// after that point was never read here; like anything in flight during a
// network drop, it is recovered from WeCom's message history by the gap
// backfill after the reconnect.
//
// Close (a graceful end: a handover, a deploy) is the WebSocket closing
// handshake: the close frame goes out, and the socket is read on until the
// server's close frame answers it (at most CloseGrace), so what the server
// sent before it saw the close is read and handed over, not lost in the
// socket; so are the acks of frames written before Close, which settle
// their frames (a frame acked then is applied, not "connection closed").
// A server that never answers costs CloseGrace before Done.
//
// # What it does not guarantee
//
// It does not tell a frame applied from one lost when the outcome is
// unknown, and does not retry anything: the caller decides. It does not
// deduplicate callbacks (WeCom may redeliver; key on msgid).
package wecom
