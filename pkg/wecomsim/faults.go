package wecomsim

// Faults: what the control API can break for one bot, to play the real
// server's and the network's failures (POST /control/faults).

import (
	"time"

	"github.com/botctl/botctl/pkg/wecom"
	"github.com/gorilla/websocket"
)

// FaultRequest injects a fault (POST /control/faults).
type FaultRequest struct {
	BotID string `json:"bot_id"`
	// Action is one of faultActions (Fault says what each does).
	Action string `json:"action"`
	// Seconds is how long stall_acks, late_acks, silence or
	// refuse_subscribe last, and how long group_silence lasts across
	// subscribes (0: until the next subscribe).
	Seconds float64 `json:"seconds,omitempty"`
	// DelaySeconds is how late late_acks sends each ack (required for it).
	DelaySeconds float64 `json:"delay_seconds,omitempty"`
	// ErrCode is what refuse_subscribe answers (default 6000, command
	// conflict; 40001 would be an auth failure, which revoke already plays).
	ErrCode int `json:"errcode,omitempty"`
	// Chat is the conversation stream_unsupported applies to (the user id
	// of a single chat, the group chat id).
	Chat string `json:"chat,omitempty"`
	// MsgID is the message whose callback's first reply drop_on_reply
	// waits for (a message posted later may name its msgid in advance:
	// MessageRequest.MsgID).
	MsgID string `json:"msgid,omitempty"`
}

// Fault actions.
const (
	FaultDrop      = "drop"
	FaultRevoke    = "revoke"
	FaultRestore   = "restore"
	FaultStallAcks = "stall_acks"
	FaultLateAcks  = "late_acks"
	FaultSilence   = "silence"
	FaultClear     = "clear"
	// FaultRefuseSubscribe answers subscribes with a non-auth errcode.
	FaultRefuseSubscribe = "refuse_subscribe"
	// FaultUnsubscribe ends the subscription but keeps the socket open.
	FaultUnsubscribe = "unsubscribe"
	// FaultStreamUnsupported answers every stream frame to one chat with
	// 600039 (device type not supported) until clear; pushes still land.
	FaultStreamUnsupported = "stream_unsupported"
	// FaultDropOnReply drops the connection when the first reply to one
	// message's callback arrives, before that reply is applied.
	FaultDropOnReply = "drop_on_reply"
	// FaultGroupSilence withholds group chats' callbacks only, direct
	// ones still delivered: from the subscribed connection until a new
	// subscribe, or for Seconds whatever connection subscribes.
	FaultGroupSilence = "group_silence"
)

const faultActions = "drop, revoke, restore, stall_acks, late_acks, silence, refuse_subscribe, unsubscribe, stream_unsupported, drop_on_reply, group_silence or clear"

// Fault injects a fault for one bot.
//   - drop: close the subscribed connection at once, no close frame and no
//     disconnected_event (a network drop).
//   - revoke: the secret stops working: the subscribed connection is closed
//     (1008) and subscribes fail until restore.
//   - restore: undo revoke.
//   - stall_acks: for Seconds, frames are processed but no ack is sent.
//   - late_acks: for Seconds, frames are processed at once but each ack is
//     sent DelaySeconds (wall clock) late, in order; callbacks are not held.
//   - silence: for Seconds, callbacks are not delivered (recorded undelivered).
//   - refuse_subscribe: for Seconds, a subscribe with the right secret is
//     answered ErrCode (default 6000) and the connection closed (1013);
//     the current connection is not touched.
//   - unsubscribe: the subscribed connection loses its subscription but
//     stays open: every frame but subscribe gets 846609 on it.
//   - stream_unsupported: every stream frame to Chat is answered 600039
//     (device type not supported) until clear; pushes to it still land.
//   - drop_on_reply: the first aibot_respond_msg frame replying to the
//     callback of message MsgID closes the connection as drop does,
//     unapplied and unacked (the network failing as a reply is sent); one
//     frame, once.
//   - group_silence: callbacks of group chats (messages and events) are
//     not delivered (recorded undelivered) while single chats' still are,
//     as a server that lost a connection's group subscription. Without
//     Seconds it holds for the subscribed connection only (none: the
//     next one), and a new subscribe ends it; with Seconds it lasts that
//     long whichever connection subscribes (a resubscribe does not help).
//   - clear: end stall_acks, late_acks, silence, refuse_subscribe,
//     stream_unsupported, drop_on_reply and group_silence now (acks already delayed still
//     go out late).
func (s *Server) Fault(req FaultRequest) error {
	b, err := s.needBot(req.BotID)
	if err != nil {
		return err
	}
	now := s.now()
	dur := time.Duration(req.Seconds * float64(time.Second))
	b.mu.Lock()
	defer b.mu.Unlock()
	log := s.log.Info().Str("bot", b.id).Str("fault", req.Action)
	switch req.Action {
	case FaultStallAcks, FaultLateAcks, FaultSilence, FaultRefuseSubscribe:
		if req.Seconds <= 0 {
			return invalid("seconds must be positive for %s (how long the fault lasts)", req.Action)
		}
		log = log.Float64("seconds", req.Seconds)
	}
	switch req.Action {
	case FaultDrop:
		if b.live != nil {
			b.live.abort()
			b.live = nil
			b.stats.Drops++
		}
	case FaultRevoke:
		b.revoked = true
		if b.live != nil {
			b.live.enqueueClose(websocket.ClosePolicyViolation, "bot secret revoked")
			b.live = nil
		}
	case FaultRestore:
		b.revoked = false
	case FaultStallAcks:
		b.stallUntil = now.Add(dur)
	case FaultSilence:
		b.silenceUntil = now.Add(dur)
	case FaultLateAcks:
		if req.DelaySeconds <= 0 {
			return invalid("delay_seconds must be positive for late_acks (how late each ack is sent)")
		}
		b.lateUntil = now.Add(dur)
		b.lateDelay = time.Duration(req.DelaySeconds * float64(time.Second))
		log = log.Float64("delay_seconds", req.DelaySeconds)
	case FaultRefuseSubscribe:
		code := req.ErrCode
		switch {
		case code == 0:
			code = wecom.ErrCodeCommandConflict
		case code == wecom.ErrCodeInvalidCredential:
			return invalid("errcode %d is the auth failure: use the revoke fault for it", code)
		}
		b.refuseUntil, b.refuseCode = now.Add(dur), code
		log = log.Int("errcode", code)
	case FaultUnsubscribe:
		if b.live != nil {
			b.live = nil
			b.stats.Unsubscribed++
		}
	case FaultStreamUnsupported:
		if req.Chat == "" {
			return invalid("chat is required for stream_unsupported: the user id of a single chat or the group chat id")
		}
		b.noStream[req.Chat] = true
		log = log.Str("chat", req.Chat)
	case FaultDropOnReply:
		if req.MsgID == "" {
			return invalid("msgid is required for drop_on_reply: the message whose reply drops the connection")
		}
		b.dropOnReply[req.MsgID] = true
		log = log.Str("msgid", req.MsgID)
	case FaultGroupSilence:
		if req.Seconds < 0 {
			return invalid("seconds must not be negative for group_silence (0: until the next subscribe; more: that long, across subscribes)")
		}
		if req.Seconds > 0 {
			b.groupSilentUntil = now.Add(dur)
			log = log.Float64("seconds", req.Seconds)
			break
		}
		b.groupSilentConn = groupSilenceNext
		if b.live != nil {
			b.groupSilentConn = b.live.id
		}
	case FaultClear:
		b.stallUntil, b.silenceUntil, b.lateUntil, b.refuseUntil = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		b.groupSilentConn, b.groupSilentUntil = 0, time.Time{}
		clear(b.noStream)
		clear(b.dropOnReply)
	case "":
		return invalid("action is required: %s", faultActions)
	default:
		return invalid("unknown fault action %q: want %s", req.Action, faultActions)
	}
	log.Msg("fault injected")
	return nil
}

// groupSilenceNext: group_silence waits for the next connection to
// subscribe (none was subscribed when it was injected).
const groupSilenceNext = ^uint64(0)

// groupSilencedLocked reports whether group_silence withholds group
// callbacks from live (nil: none subscribed) at now. Call with b.mu held.
func (b *bot) groupSilencedLocked(live *conn, now time.Time) bool {
	if now.Before(b.groupSilentUntil) {
		return true
	}
	if live == nil {
		return b.groupSilentConn == groupSilenceNext
	}
	if b.groupSilentConn == groupSilenceNext {
		b.groupSilentConn = live.id
	}
	return b.groupSilentConn != 0 && b.groupSilentConn == live.id
}
