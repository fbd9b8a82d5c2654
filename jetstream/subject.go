package jetstream

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Tokens: WeCom user ids, group chat ids and msgids are opaque strings that
// may contain '.', '*', '>', spaces or anything else, none of which may
// appear in a NATS subject token (and not all of which may appear in a KV
// key). EncodeToken keeps an id that is already safe as it is, so an
// operator reading `nats stream subjects` sees real ids, and encodes any
// other id as "=" followed by its unpadded base64url form. The marker '='
// never appears in a kept id, so decoding is unambiguous.

// tokenMarker starts an encoded token.
const tokenMarker = '='

var b64 = base64.RawURLEncoding

// safeTokenChar is true for the characters kept as they are: they are valid
// in subject tokens, in KV keys and in file names, and need no quoting in a
// shell.
func safeTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// EncodeToken returns id as one subject token that is also a valid KV key.
// It is reversible with DecodeToken, and two different ids never share a
// token. The empty id encodes as "=".
func EncodeToken(id string) string {
	if id != "" {
		safe := true
		for i := 0; i < len(id); i++ {
			if !safeTokenChar(id[i]) {
				safe = false
				break
			}
		}
		if safe {
			return id
		}
	}
	return string(tokenMarker) + b64.EncodeToString([]byte(id))
}

// ErrBadToken is returned when a subject token or key was not made by
// EncodeToken.
var ErrBadToken = errors.New("not a botctl token")

// DecodeToken reverses EncodeToken.
func DecodeToken(tok string) (string, error) {
	if tok == "" {
		return "", fmt.Errorf("%w: empty", ErrBadToken)
	}
	if tok[0] == tokenMarker {
		raw, err := b64.DecodeString(tok[1:])
		if err != nil {
			return "", fmt.Errorf("%w: %q: %v", ErrBadToken, tok, err)
		}
		return string(raw), nil
	}
	for i := 0; i < len(tok); i++ {
		if !safeTokenChar(tok[i]) {
			return "", fmt.Errorf("%w: %q has %q", ErrBadToken, tok, tok[i])
		}
	}
	return tok, nil
}

// TaskSubject is the subject of the task of one conversation of one bot:
// "<prefix>.tasks.<bot>.<conversation>", each id encoded with EncodeToken.
// The task stream holds at most one message per such subject.
func (n Names) TaskSubject(bot, conversation string) string {
	return n.TaskSubjectPrefix + "." + EncodeToken(bot) + "." + EncodeToken(conversation)
}

// NoticeSubject is where changes of bot's tasks that its leader's pusher
// must act on at once are announced: "<prefix>.notice.<bot>".
func (n Names) NoticeSubject(bot string) string {
	return n.NoticeSubjectPrefix + "." + EncodeToken(bot)
}

// CancelSubject is where the cancellation of task id is announced:
// "<prefix>.cancel.<id>".
func (n Names) CancelSubject(id string) string {
	return n.CancelSubjectPrefix + "." + EncodeToken(id)
}

// FlushSubject is where node's worker hears the pusher's flush requests
// (payload: a task id whose text in progress to write now), node encoded
// with EncodeToken.
func (n Names) FlushSubject(node string) string {
	return n.FlushSubjectPrefix + "." + EncodeToken(node)
}

// CancelSubjects matches every CancelSubject.
func (n Names) CancelSubjects() string { return n.CancelSubjectPrefix + ".*" }

// CanceledTask is the task id of a CancelSubject.
func (n Names) CanceledTask(subject string) (string, bool) {
	tok, ok := strings.CutPrefix(subject, n.CancelSubjectPrefix+".")
	if !ok {
		return "", false
	}
	id, err := DecodeToken(tok)
	return id, err == nil
}

// ParseTaskSubject returns the bot and conversation ids of a task subject.
func (n Names) ParseTaskSubject(subject string) (bot, conversation string, err error) {
	rest, ok := strings.CutPrefix(subject, n.TaskSubjectPrefix+".")
	if !ok {
		return "", "", fmt.Errorf("task subject %q: does not start with %s", subject, n.TaskSubjectPrefix+".")
	}
	botTok, convTok, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(convTok, ".") {
		return "", "", fmt.Errorf("task subject %q: want %s.<bot>.<conversation>", subject, n.TaskSubjectPrefix)
	}
	if bot, err = DecodeToken(botTok); err != nil {
		return "", "", fmt.Errorf("task subject %q: bot: %w", subject, err)
	}
	if conversation, err = DecodeToken(convTok); err != nil {
		return "", "", fmt.Errorf("task subject %q: conversation: %w", subject, err)
	}
	return bot, conversation, nil
}

// ConversationKey is the key of a conversation in the context bucket:
// "<bot>.<conversation>", each id encoded with EncodeToken, so that
// `nats kv ls` groups a bot's conversations and a watch on "<bot>.>" sees
// only that bot's.
func ConversationKey(bot, conversation string) string {
	return EncodeToken(bot) + "." + EncodeToken(conversation)
}

// BotKey is the key of a bot in per-bot buckets such as the watermarks.
func BotKey(bot string) string { return EncodeToken(bot) }

// TaskKey is the key of a task in the task-record and output buckets.
func TaskKey(taskID string) string { return EncodeToken(taskID) }
