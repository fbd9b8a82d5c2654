package task

import (
	"context"
	"fmt"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/schema"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// AgentSession is one conversation an agent platform (Dify) holds for a
// chat: its id there, for one user (the platform ties a conversation to
// the user who started it, so a group chat has one per user) and one
// backend (an id means nothing to another app).
type AgentSession struct {
	Backend string `json:"backend"` // the backend's Name, e.g. "dify:api.dify.ai"
	User    string `json:"user"`
	ID      string `json:"id"`
}

// maxSessions bounds a conversation's sessions: a large group's users
// beyond it lose the oldest first (they start a new conversation on the
// platform, as after an idle expiry).
const maxSessions = 64

// Sessions keeps the agent platforms' conversation ids in the context
// bucket, in each chat's conversation record, where every node reads them:
// a question answered after a failover continues the same conversation on
// the platform. It is pkg/ai's Sessions.
type Sessions struct {
	kv  natsjs.KeyValue
	log zerolog.Logger
}

// NewSessions keeps sessions in kv, the context bucket; failures are
// logged here (the backend goes on answering without them).
func NewSessions(kv natsjs.KeyValue, log zerolog.Logger) *Sessions {
	return &Sessions{kv: kv, log: log.With().Str("component", "sessions").Logger()}
}

// Session is the id stored for bot's chat, user and backend ("" when none).
func (s *Sessions) Session(ctx context.Context, bot, chat, user, backend string) (string, error) {
	c, _, err := LoadConversation(ctx, s.kv, jetstream.ConversationKey(bot, chat))
	if err != nil {
		s.log.Warn().Err(err).Str("bot", bot).Str("backend", backend).Msg("agent conversation not read; this answer starts a new one")
		return "", err
	}
	for _, x := range c.Sessions {
		if x.Backend == backend && x.User == user {
			return x.ID, nil
		}
	}
	return "", nil
}

// SetSession stores id for bot's chat, user and backend, with
// compare-and-set beside the turns AppendExchange writes ("" forgets it).
func (s *Sessions) SetSession(ctx context.Context, bot, chat, user, backend, id string) error {
	key := jetstream.ConversationKey(bot, chat)
	err := s.set(ctx, key, AgentSession{Backend: backend, User: user, ID: id})
	if err != nil {
		s.log.Warn().Err(err).Str("bot", bot).Str("backend", backend).Msg("agent conversation not stored; the next question starts a new one")
	}
	return err
}

func (s *Sessions) set(ctx context.Context, key string, session AgentSession) error {
	for attempt := 0; attempt < 20; attempt++ {
		jetstream.CASPause(ctx, attempt)
		c, rev, err := LoadConversation(ctx, s.kv, key)
		if err != nil {
			return err
		}
		kept := c.Sessions[:0]
		for _, x := range c.Sessions {
			if x.Backend != session.Backend || x.User != session.User {
				kept = append(kept, x)
			}
		}
		if session.ID != "" {
			kept = append(kept, session) // the most recent last
		}
		if len(kept) > maxSessions {
			kept = kept[len(kept)-maxSessions:]
		}
		c.Sessions = kept
		raw, _ := schema.Marshal(c)
		if rev == 0 {
			_, err = s.kv.Create(ctx, key, raw)
		} else {
			_, err = s.kv.Update(ctx, key, raw, rev)
		}
		if err == nil || !jetstream.LostCAS(err) {
			return err
		}
	}
	return fmt.Errorf("update conversation %s: too many concurrent writers", key)
}
