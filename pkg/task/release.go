package task

import (
	"context"
	"encoding/json"
	"errors"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"strings"
	"sync"
	"time"
)

// A conversation is held by its task's queue message: the queue's
// per-conversation subject is its mutex. Whoever ends a task that holds
// one (the sweep past the deadline, the max-deliveries advisory, the
// user's /stop, an operator's `botctl tasks release`) writes the ending
// in the record, which tells the user, and removes the message.
//
// When the record cannot be written (the tasks bucket failing, or the
// record never landed and cannot be made now) the message is removed all
// the same: no conversation is held by a task that nobody can end. The
// ending is then owed: this node keeps it in memory and writes it once
// the bucket answers again (the bot's next sweep, or the advisory
// watch's retry), so that the user is still told. An ending owed by a
// node that stops before the bucket is back is lost: the conversation is
// free, but its user hears nothing of that question.

// ending is how a task is ended.
type ending int

const (
	// endGiveUp: failed, it can never run again (its last delivery
	// ended unacked; an operator's release).
	endGiveUp ending = iota
	// endCancel: canceled (the user's /stop).
	endCancel
	// endDeadline: failed if its record says the execution deadline has
	// passed; a record that began later is left running (its worker
	// holds its own deadline).
	endDeadline
	// endRefused, endRefusedBusy, endRefusedSaying: refused before it
	// ran (Refused), with a busy reply for endRefusedBusy, with the
	// reason's own words for endRefusedSaying (RefusedSaying).
	endRefused
	endRefusedBusy
	endRefusedSaying
)

// refusal reports whether how is a refusal (Refused, RefusedSaying).
func (how ending) refusal() bool {
	return how == endRefused || how == endRefusedBusy || how == endRefusedSaying
}

// Released is what Stop or Release did to a conversation.
type Released struct {
	Bot  string `json:"bot"`
	Chat string `json:"chat"`
	// Removed: the conversation's queue message was removed, and the
	// conversation takes a new question.
	Removed bool `json:"removed"`
	// Seq is the removed message's sequence in the task stream.
	Seq uint64 `json:"seq,omitempty"`
	// Task is the task the message named ("" when it was not a task's).
	Task string `json:"task,omitempty"`
	// Record is what became of the task's record: "failed" or "canceled"
	// (ended now), "opened and failed" or "opened and canceled" (it had
	// none: made from the message, then ended), "already <exec>" (it had
	// ended before), "not written" (the tasks bucket refused: Error says
	// how; the ending is owed, see above, and the user told only if this
	// lifecycle lives until the bucket answers) or "none" (no task).
	Record string `json:"record"`
	Error  string `json:"error,omitempty"`
}

// Ended reports whether a task that had not ended was ended (or its
// ending owed) and its conversation freed: false when the conversation
// held no task, or only the stale message of one that had ended.
func (r Released) Ended() bool {
	return r.Removed && r.Task != "" && !strings.HasPrefix(r.Record, "already ")
}

// Stop cancels the task that holds conversation chat of bot (/stop): its
// record says canceled (opened from the queue message when it never
// landed), the worker running it is told to stop, and its queue message
// is removed, even when the record cannot be written. Removed false: the
// conversation held no task. An error: the queue could not be read or
// the message not removed.
func (l *Lifecycle) Stop(ctx context.Context, bot, chat, reason string) (Released, error) {
	return l.endConversation(ctx, bot, chat, reason, endCancel)
}

// Release is Stop for an operator (`botctl tasks release`): the task, if
// not finished, is failed with reason rather than canceled.
func (l *Lifecycle) Release(ctx context.Context, bot, chat, reason string) (Released, error) {
	return l.endConversation(ctx, bot, chat, reason, endGiveUp)
}

func (l *Lifecycle) endConversation(ctx context.Context, bot, chat, reason string, how ending) (Released, error) {
	rel := Released{Bot: bot, Chat: chat, Record: "none"}
	msg, err := l.store.ConversationTask(ctx, bot, chat)
	if err != nil || msg == nil {
		return rel, err
	}
	// The message first: the conversation is free whatever the record
	// step costs (a failing bucket answers nothing until the caller's
	// deadline).
	if err := l.store.RemoveTask(ctx, msg.Sequence); err != nil {
		return rel, err
	}
	rel.Seq, rel.Removed = msg.Sequence, true
	var m Message
	if json.Unmarshal(msg.Data, &m) == nil && m.TaskID != "" {
		rel.Task = m.TaskID
		if rel.Record, err = l.end(ctx, m, reason, how, 0); err != nil {
			rel.Record, rel.Error = "not written", err.Error()
			if how == endCancel {
				// The record cannot tell the worker running it, if one
				// does: the announcement can.
				if aerr := l.announce(l.store.Names().CancelSubject(m.TaskID), nil); aerr != nil {
					l.log.Warn().Err(aerr).Str("task", m.TaskID).Msg("cancel not announced")
				}
			}
			l.owe(m, reason, how, 0)
		}
	}
	l.log.Info().Str("bot", bot).Str("chat", chat).Str("task", rel.Task).Uint64("seq", msg.Sequence).
		Str("record", rel.Record).Str("reason", reason).Msg("conversation released")
	return rel, nil
}

// end ends the task of m how (deadline: endDeadline's) and says what
// became of its record (see Released.Record). A task without a record is
// opened from m first, so that the ending reaches the user.
func (l *Lifecycle) end(ctx context.Context, m Message, reason string, how ending, deadline time.Duration) (string, error) {
	if how.refusal() {
		r, err := l.refused(ctx, m, reason, how)
		if err != nil {
			return "", err
		}
		return string(r.Exec), nil
	}
	r, err := l.Get(ctx, m.TaskID)
	opened := ""
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		r, err = l.Open(ctx, RecordOf(m))
		opened = "opened and "
	}
	if err != nil {
		return "", err
	}
	if r.Exec.Finished() {
		return "already " + string(r.Exec), nil
	}
	switch how {
	case endCancel:
		r, err = l.Cancel(ctx, r.ID, reason)
		if errors.Is(err, ErrFinished) && r != nil {
			return "already " + string(r.Exec), nil
		}
	case endDeadline:
		if !pastDeadline(r, deadline, l.now()) {
			return "running", nil
		}
		r, err = l.GiveUp(ctx, r.ID, reason, nil)
	default:
		r, err = l.GiveUp(ctx, r.ID, reason, nil)
	}
	if err != nil {
		return "", err
	}
	return opened + string(r.Exec), nil
}

// maxOwed bounds the endings a node keeps owing; past it one more is
// dropped (logged): its conversation is free, its user is not told.
const maxOwed = 4096

// owedEndings are the endings not written yet, by task id.
type owedEndings struct {
	mu sync.Mutex
	m  map[string]owedEnding
}

type owedEnding struct {
	msg      Message
	reason   string
	how      ending
	deadline time.Duration
}

func newOwedEndings() *owedEndings { return &owedEndings{m: make(map[string]owedEnding)} }

// owe keeps the ending of m's task to write later (see above).
func (l *Lifecycle) owe(m Message, reason string, how ending, deadline time.Duration) {
	l.owed.mu.Lock()
	defer l.owed.mu.Unlock()
	log := l.log.Warn().Str("task", m.TaskID).Str("bot", m.Bot).Str("chat", m.Chat)
	if _, ok := l.owed.m[m.TaskID]; !ok && len(l.owed.m) >= maxOwed {
		log.Msg("task record not written and too many owed already: its conversation is free, its user is not told")
		return
	}
	l.owed.m[m.TaskID] = owedEnding{msg: m, reason: reason, how: how, deadline: deadline}
	log.Str("reason", reason).Msg("task record not written; its conversation is freed anyway and the ending written once the tasks bucket answers")
}

// Owed is how many endings this node still owes (see above).
func (l *Lifecycle) Owed() int {
	l.owed.mu.Lock()
	defer l.owed.mu.Unlock()
	return len(l.owed.m)
}

// settleOwed writes the owed endings of bot ("": of every bot), until the
// bucket fails again, and returns how many it wrote. One that fails for
// another reason than the bucket (a record that does not decode) is
// dropped.
func (l *Lifecycle) settleOwed(ctx context.Context, bot string) int {
	l.owed.mu.Lock()
	var todo []owedEnding
	for _, o := range l.owed.m {
		if bot == "" || o.msg.Bot == bot {
			todo = append(todo, o)
		}
	}
	l.owed.mu.Unlock()
	n := 0
	for _, o := range todo {
		if ctx.Err() != nil {
			return n
		}
		rec, err := l.end(ctx, o.msg, o.reason, o.how, o.deadline)
		if err != nil && StoreFailed(err) {
			return n // still failing: the next round
		}
		l.owed.mu.Lock()
		delete(l.owed.m, o.msg.TaskID)
		l.owed.mu.Unlock()
		log := l.log.With().Str("task", o.msg.TaskID).Str("bot", o.msg.Bot).Str("chat", o.msg.Chat).Logger()
		if err != nil {
			log.Warn().Err(err).Msg("owed task ending not written, and dropped")
			continue
		}
		n++
		log.Info().Str("record", rec).Str("reason", o.reason).Msg("owed task ending written")
	}
	return n
}
