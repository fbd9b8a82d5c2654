package task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Output is what a worker has produced for a task: the accumulated answer
// so far, written to the output bucket under the task's id (coalesced: a
// few writes per second at most). The pusher watches it.
type Output struct {
	TaskID   string    `json:"task_id"`
	Bot      string    `json:"bot"`
	Text     string    `json:"text"`
	Done     bool      `json:"done"`               // the answer is complete (or ended, see Canceled/Error)
	Canceled bool      `json:"canceled,omitempty"` // stopped by /stop or an operator
	Error    string    `json:"error,omitempty"`    // the attempt failed; Text is what came before
	Attempt  int       `json:"attempt"`
	Updated  time.Time `json:"updated"`
}

// PutOutput writes o.
func PutOutput(ctx context.Context, kv natsjs.KeyValue, o *Output) (uint64, error) {
	raw, err := json.Marshal(o)
	if err != nil {
		return 0, err
	}
	rev, err := kv.Put(ctx, o.TaskID, raw)
	if err != nil {
		return 0, fmt.Errorf("write output of task %s: %w", o.TaskID, err)
	}
	return rev, nil
}

// GetOutput reads a task's output; (nil, nil) if there is none yet.
func GetOutput(ctx context.Context, kv natsjs.KeyValue, id string) (*Output, error) {
	e, err := kv.Get(ctx, id)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read output of task %s: %w", id, err)
	}
	return DecodeOutput(e.Value())
}

// DecodeOutput parses a value of the output bucket.
func DecodeOutput(raw []byte) (*Output, error) {
	var o Output
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, fmt.Errorf("corrupt output: %w", err)
	}
	return &o, nil
}

// Message is the task stream's message: everything a worker needs to run
// the task even if its record is not (yet) in the bucket.
type Message struct {
	TaskID   string    `json:"task_id"`
	Bot      string    `json:"bot"`
	MsgID    string    `json:"msgid"`
	ReqID    string    `json:"req_id,omitempty"`
	Term     int64     `json:"term,omitempty"`
	StreamID string    `json:"stream_id,omitempty"`
	Chat     string    `json:"chat"`
	ChatType string    `json:"chat_type"`
	User     string    `json:"user"`
	Question string    `json:"question"`
	Received time.Time `json:"received"`
}

// MessageOf is r's task message.
func MessageOf(r *Record) Message {
	return Message{TaskID: r.ID, Bot: r.Bot, MsgID: r.MsgID, ReqID: r.ReqID, Term: r.Term, StreamID: r.StreamID,
		Chat: r.Chat, ChatType: r.ChatType, User: r.User, Question: r.Question, Received: r.Received}
}

// RecordOf rebuilds a record from a task message (the raw context a worker
// has when the leader's record write has not landed).
func RecordOf(m Message) *Record {
	r := New(m.Bot, m.MsgID, m.Received)
	r.Chat, r.ChatType, r.User, r.Question = m.Chat, m.ChatType, m.User, m.Question
	r.ReqID, r.Term, r.StreamID = m.ReqID, m.Term, m.StreamID
	return r
}

// Hash identifies content the user has seen, so a new leader does not
// resend what is already on the user's screen.
func Hash(content string) string {
	h := sha256.Sum256([]byte(content))
	return hex.EncodeToString(h[:8])
}
