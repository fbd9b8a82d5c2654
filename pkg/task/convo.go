package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/schema"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Turn is one side of one exchange in a conversation's context.
type Turn struct {
	Role    string `json:"role"` // "user" or "assistant"
	Content string `json:"content"`
}

// Conversation is the multi-turn context of one chat, bounded.
type Conversation struct {
	Turns []Turn `json:"turns"`
	// Updated is when the last exchange was added (zero in contexts
	// written before it was kept: never idle).
	Updated time.Time `json:"updated,omitzero"`
	// Sessions are the conversations agent platforms hold for this chat
	// (session.go): kept beside the turns so that /new, which purges the
	// record, and the bucket's idle expiry forget them with the rest.
	Sessions []AgentSession `json:"sessions,omitempty"`
}

// Memory bounds a conversation's context: at most Turns turns (0: none
// kept) and Bytes of content, oldest dropped first, forgotten once idle
// (nothing added) for IdleExpiry (0: never, but for the bucket's TTL).
type Memory struct {
	Turns, Bytes int
	IdleExpiry   time.Duration
}

// Idle reports whether c was last added to longer than m.IdleExpiry
// before now: its turns are not used, and the next exchange starts afresh.
func (c *Conversation) Idle(m Memory, now time.Time) bool {
	return m.IdleExpiry > 0 && !c.Updated.IsZero() && now.Sub(c.Updated) > m.IdleExpiry
}

// LoadConversation reads a conversation's context (empty if none). A
// context a newer botctl wrote is an error wrapping schema.ErrNewer, so
// AppendExchange and SetSession do not write over it.
func LoadConversation(ctx context.Context, kv natsjs.KeyValue, key string) (*Conversation, uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return &Conversation{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read conversation %s: %w", key, err)
	}
	if err := schema.Check(KindConversation, e.Value()); err != nil {
		// Neither used nor written over: the answer goes without it.
		return nil, 0, fmt.Errorf("conversation %s: %w", key, err)
	}
	var c Conversation
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return &Conversation{}, e.Revision(), nil // corrupt context: start afresh rather than fail the task
	}
	return &c, e.Revision(), nil
}

// AppendExchange adds a question and its answer at now, within m (an idle
// context is dropped first), with compare-and-set. With m.Turns 0 nothing
// is kept.
func AppendExchange(ctx context.Context, kv natsjs.KeyValue, key, question, answer string, m Memory, now time.Time) error {
	return AppendExchangeFrom(ctx, kv, key, question, answer, m, now, nil, 0)
}

// AppendExchangeFrom is AppendExchange starting from from, the
// conversation as LoadConversation read it at rev (the worker read it for
// the prompt): when nobody wrote it since, the append costs one write and
// no read. from nil: read first. from is not changed.
func AppendExchangeFrom(ctx context.Context, kv natsjs.KeyValue, key, question, answer string, m Memory, now time.Time, from *Conversation, rev uint64) error {
	if m.Turns <= 0 {
		return nil
	}
	for attempt := 0; attempt < 20; attempt++ {
		jetstream.CASPause(ctx, attempt)
		var c *Conversation
		var err error
		if attempt == 0 && from != nil {
			cp := *from
			cp.Turns, cp.Sessions = slices.Clone(from.Turns), slices.Clone(from.Sessions)
			c = &cp
		} else {
			if c, rev, err = LoadConversation(ctx, kv, key); err != nil {
				return err
			}
		}
		if c.Idle(m, now) {
			c.Turns = nil
		}
		c.Turns = append(c.Turns, Turn{"user", question}, Turn{"assistant", answer})
		c.Turns, c.Updated = bound(c.Turns, m.Turns, m.Bytes), now.UTC()
		raw, _ := schema.Marshal(c)
		if rev == 0 {
			_, err = kv.Create(ctx, key, raw)
		} else {
			_, err = kv.Update(ctx, key, raw, rev)
		}
		if err == nil || !jetstream.LostCAS(err) {
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
