package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/botctl/botctl/dataplane"
	"github.com/nats-io/nats.go/jetstream"
)

// Turn is one side of one exchange in a conversation's context.
type Turn struct {
	Role    string `json:"role"` // "user" or "assistant"
	Content string `json:"content"`
}

// Conversation is the multi-turn context of one chat, bounded.
type Conversation struct {
	Turns []Turn `json:"turns"`
	// Sessions are the conversations agent platforms hold for this chat
	// (session.go): kept beside the turns so that /new, which purges the
	// record, and the bucket's idle expiry forget them with the rest.
	Sessions []AgentSession `json:"sessions,omitempty"`
}

// LoadConversation reads a conversation's context (empty if none).
func LoadConversation(ctx context.Context, kv jetstream.KeyValue, key string) (*Conversation, uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &Conversation{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read conversation %s: %w", key, err)
	}
	var c Conversation
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return &Conversation{}, e.Revision(), nil // corrupt context: start afresh rather than fail the task
	}
	return &c, e.Revision(), nil
}

// AppendExchange adds a question and its answer, keeping at most maxTurns
// turns and maxBytes of content (oldest dropped first), with compare-and-set.
func AppendExchange(ctx context.Context, kv jetstream.KeyValue, key, question, answer string, maxTurns, maxBytes int) error {
	for attempt := 0; attempt < 20; attempt++ {
		dataplane.CASPause(ctx, attempt)
		c, rev, err := LoadConversation(ctx, kv, key)
		if err != nil {
			return err
		}
		c.Turns = append(c.Turns, Turn{"user", question}, Turn{"assistant", answer})
		c.Turns = bound(c.Turns, maxTurns, maxBytes)
		raw, _ := json.Marshal(c)
		if rev == 0 {
			_, err = kv.Create(ctx, key, raw)
		} else {
			_, err = kv.Update(ctx, key, raw, rev)
		}
		if err == nil || !dataplane.LostCAS(err) {
			return err
		}
	}
	return fmt.Errorf("update conversation %s: too many concurrent writers", key)
}

func bound(turns []Turn, maxTurns, maxBytes int) []Turn {
	if maxTurns > 0 && len(turns) > maxTurns {
		turns = turns[len(turns)-maxTurns:]
	}
	size := 0
	for i := len(turns) - 1; i >= 0; i-- {
		size += len(turns[i].Content)
		if maxBytes > 0 && size > maxBytes {
			return append([]Turn(nil), turns[i+1:]...)
		}
	}
	return turns
}
