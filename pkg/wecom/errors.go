package wecom

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Errors a caller acts on.
var (
	// ErrAuthFailed: the server refused the bot id or secret with an
	// authentication errcode (IsAuthErrCode). Retrying with the same secret
	// never helps; a human has to fix the credentials. Only Dial returns it.
	ErrAuthFailed = errors.New("wecom: authentication failed")
	// ErrSubscribeRefused: the server refused aibot_subscribe with an
	// errcode that is not about credentials (command conflict, system
	// busy…). The credentials may be fine: back off and dial again.
	ErrSubscribeRefused = errors.New("wecom: subscribe refused")
	// ErrAckUnknown: the frame's outcome is unknown. It may or may not have
	// been applied by the server; confirm another way before treating it as
	// delivered or failed (for a reply whose final frame is unknown: deliver
	// the answer by proactive push, which has its own req_id), and never
	// count it as a refusal of the content. Every ErrAckTimeout is also an
	// ErrAckUnknown; it is returned alone when an ack came but may belong
	// to an earlier, timed-out frame of the same req_id (see the package
	// doc). Connection-wide (IsConnectionError).
	ErrAckUnknown = errors.New("wecom: frame outcome unknown")
	// ErrAckTimeout: no ack within the ack timeout. The frame may or may not
	// have been applied by the server (errors.Is(err, ErrAckUnknown) holds
	// too). Connection-wide; MaxAckTimeouts in a row close the connection.
	ErrAckTimeout = errors.New("wecom: ack timeout")
	// ErrClosed: the connection is closed; CloseError says why.
	ErrClosed = errors.New("wecom: connection closed")
	// ErrContentTooLarge: stream or markdown content over MaxContentBytes.
	ErrContentTooLarge = errors.New("wecom: content too large")
	// ErrFrameTooLarge: an encoded frame over MaxFrameBytes.
	ErrFrameTooLarge = errors.New("wecom: frame too large")
	// ErrInvalidUTF8: content is not valid UTF-8.
	ErrInvalidUTF8 = errors.New("wecom: content is not valid UTF-8")
	// ErrInvalidFrame: a frame the client refuses to send (missing req_id,
	// missing stream id, too many images…).
	ErrInvalidFrame = errors.New("wecom: invalid frame")
)

// CloseReason says why a connection ended. Callers switch on it: a kicked
// or lost connection asks the election before coming back; an auth failure
// needs a human.
type CloseReason int

const (
	// ReasonNone: the connection is still open.
	ReasonNone CloseReason = iota
	// ReasonKicked: the server sent disconnected_event: another connection
	// subscribed with this bot id.
	ReasonKicked
	// ReasonAuthFailed: aibot_subscribe was refused.
	ReasonAuthFailed
	// ReasonHeartbeatLost: too many pings in a row went unacked.
	ReasonHeartbeatLost
	// ReasonNetwork: read or write failed, or the server closed the socket.
	ReasonNetwork
	// ReasonClosedByUs: Close was called.
	ReasonClosedByUs
	// ReasonNotSubscribed: a frame or ping was answered 846609: the socket
	// is open but the server no longer counts it as subscribed (another
	// connection fought over the bot). Reconnect through the election.
	ReasonNotSubscribed
	// ReasonAckTimeouts: Config.MaxAckTimeouts frames in a row went
	// unacked on a socket that still looked open.
	ReasonAckTimeouts
	// ReasonBacklog: Config.CallbackQueue callbacks waited for the
	// handlers; reading stopped so that none is lost (all read were handed
	// over). What the server sent after that is for the gap backfill.
	ReasonBacklog
	// ReasonUnhealthy: CloseUnhealthy was called: the health monitor found
	// the connection dead or deaf (a probe went unacked, or no callback
	// came for far longer than the bot's traffic allows) and closed it to
	// reconnect.
	ReasonUnhealthy
)

func (r CloseReason) String() string {
	switch r {
	case ReasonNone:
		return "open"
	case ReasonKicked:
		return "kicked"
	case ReasonAuthFailed:
		return "auth_failed"
	case ReasonHeartbeatLost:
		return "heartbeat_lost"
	case ReasonNetwork:
		return "network_error"
	case ReasonClosedByUs:
		return "closed_by_us"
	case ReasonNotSubscribed:
		return "not_subscribed"
	case ReasonAckTimeouts:
		return "ack_timeouts"
	case ReasonBacklog:
		return "callback_backlog"
	case ReasonUnhealthy:
		return "unhealthy"
	}
	return fmt.Sprintf("reason(%d)", int(r))
}

// CloseError is the error a closed connection reports: its reason and the
// underlying cause, if any. errors.Is(err, ErrClosed) holds for it, and
// errors.Is(err, ErrAuthFailed) too when the reason is ReasonAuthFailed.
type CloseError struct {
	Reason CloseReason
	Cause  error
}

func (e *CloseError) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("wecom: connection closed (%s): %v", e.Reason, e.Cause)
	}
	return fmt.Sprintf("wecom: connection closed (%s)", e.Reason)
}

// Is makes errors.Is(err, ErrClosed) and, for auth failures, ErrAuthFailed hold.
func (e *CloseError) Is(target error) bool {
	return target == ErrClosed || (target == ErrAuthFailed && e.Reason == ReasonAuthFailed)
}

func (e *CloseError) Unwrap() error { return e.Cause }

// AuthError is a refused aibot_subscribe. errors.Is(err, ErrAuthFailed) holds.
type AuthError struct {
	BotID   string
	ErrCode int
	ErrMsg  string
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("wecom: bot %s: authentication failed: errcode %d: %s (check the bot id and secret; retrying will not help)",
		e.BotID, e.ErrCode, e.ErrMsg)
}

// Is makes errors.Is(err, ErrAuthFailed) hold.
func (e *AuthError) Is(target error) bool { return target == ErrAuthFailed }

// SubscribeError is aibot_subscribe refused with an errcode that is not an
// authentication errcode. errors.Is(err, ErrSubscribeRefused) holds; it is
// retryable after a back-off.
type SubscribeError struct {
	BotID   string
	ErrCode int
	ErrMsg  string
}

func (e *SubscribeError) Error() string {
	return fmt.Sprintf("wecom: bot %s: subscribe refused: errcode %d: %s (not a credentials problem: retry after a back-off)",
		e.BotID, e.ErrCode, e.ErrMsg)
}

// Is makes errors.Is(err, ErrSubscribeRefused) hold.
func (e *SubscribeError) Is(target error) bool { return target == ErrSubscribeRefused }

// IsAuthErrCode reports whether an errcode answering aibot_subscribe means
// the credentials are wrong, unknown or revoked. Only these make Dial
// return ErrAuthFailed. WeCom documents no list for the long connection;
// 40001 is what the simulator (and, as far as is known, WeCom) answers.
func IsAuthErrCode(code int) bool {
	return code == ErrCodeInvalidCredential
}

// ackTimeoutError is ErrAckTimeout for one frame; it is ErrAckUnknown too.
type ackTimeoutError struct {
	cmd, reqID string
	after      time.Duration
}

func (e *ackTimeoutError) Error() string {
	return fmt.Sprintf("%v: %s (req_id %s) after %s: the frame may or may not have been applied", ErrAckTimeout, e.cmd, e.reqID, e.after)
}

func (e *ackTimeoutError) Is(target error) bool {
	return target == ErrAckTimeout || target == ErrAckUnknown
}

// IsConnectionError reports whether err is about the connection rather than
// about the frame that got it. The contract, for a caller that counts
// delivery attempts:
//   - true: the connection failed or cannot tell (closed, ack timeout,
//     unknown outcome, not subscribed 846609, command conflict 6000, system
//     busy -1, the transient 846601/846602, subscribe refused). Do not spend
//     the task's attempts on it: wait for a healthy connection (the
//     connection closes itself on 846609 and on repeated ack timeouts) and
//     try again, the task's own deadline still applying. For ErrAckUnknown
//     confirm the outcome another way before resending a final frame.
//   - false: the server judged this frame (846605 invalid req_id, 846608
//     stream expired, 40008, 40058, 40060, 45009 rate limited, 846604…),
//     or the client refused it before sending (ErrContentTooLarge,
//     ErrInvalidFrame…), or err is nil or the caller's context error. These
//     are about the task: act on the errcode.
func IsConnectionError(err error) bool {
	if err == nil {
		return false
	}
	var ae *AckError
	if errors.As(err, &ae) {
		return isConnectionErrCode(ae.ErrCode)
	}
	return errors.Is(err, ErrClosed) || errors.Is(err, ErrAckTimeout) || errors.Is(err, ErrAckUnknown) ||
		errors.Is(err, ErrSubscribeRefused)
}

// isConnectionErrCode: errcodes the server gives for its own or the
// connection's state, whatever the frame said. Reasons: 846609 is about
// the subscription; -1 is WeCom's global "system busy"; 6000 (command
// conflict) and 846601/846602 are transient in every integration seen, and
// none of them names anything in the frame.
func isConnectionErrCode(code int) bool {
	switch code {
	case ErrCodeNotSubscribed, ErrCodeSystemBusy, ErrCodeCommandConflict, ErrCodeTransient1, ErrCodeTransient2:
		return true
	}
	return false
}

func asAckError(err error, target **AckError) bool { return errors.As(err, target) }

func randomHex(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}
