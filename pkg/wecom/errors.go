package wecom

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// Errors a caller acts on.
var (
	// ErrAuthFailed: the server refused the bot id or secret. Retrying with
	// the same secret never helps; a human has to fix the credentials.
	ErrAuthFailed = errors.New("wecom: authentication failed")
	// ErrAckTimeout: no ack within the ack timeout. The frame may or may not
	// have been applied by the server.
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

func asAckError(err error, target **AckError) bool { return errors.As(err, target) }

func randomHex(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}
