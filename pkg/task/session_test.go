package task

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/rs/zerolog"
)

// TestSessions: an agent's conversation id is kept per user and backend
// in the chat's record, beside the turns (appending an exchange keeps it,
// as setting one keeps the turns); "" forgets one; a chat keeps at most
// maxSessions, the oldest dropped first.
func TestSessions(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	ctx := context.Background()
	s := NewSessions(env.Store.Context(), zerolog.Nop())
	get := func(user, backend string) string {
		t.Helper()
		id, err := s.Session(ctx, "b1", "group", user, backend)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	if id := get("alice", "dify:a"); id != "" {
		t.Fatalf("no session yet: %q", id)
	}
	for _, x := range []struct{ user, backend, id string }{{"alice", "dify:a", "c1"}, {"alice", "dify:b", "c2"}, {"bob", "dify:a", "c3"}} {
		if err := s.SetSession(ctx, "b1", "group", x.user, x.backend, x.id); err != nil {
			t.Fatal(err)
		}
	}
	key := jetstream.ConversationKey("b1", "group")
	if err := AppendExchange(ctx, env.Store.Context(), key, "q", "a", Memory{Turns: 20, Bytes: 1 << 14}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if get("alice", "dify:a") != "c1" || get("alice", "dify:b") != "c2" || get("bob", "dify:a") != "c3" {
		t.Fatalf("sessions after an exchange: %q %q %q", get("alice", "dify:a"), get("alice", "dify:b"), get("bob", "dify:a"))
	}
	if err := s.SetSession(ctx, "b1", "group", "alice", "dify:a", "c4"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSession(ctx, "b1", "group", "bob", "dify:a", ""); err != nil {
		t.Fatal(err)
	}
	c, _, err := LoadConversation(ctx, env.Store.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Turns) != 2 || get("alice", "dify:a") != "c4" || get("bob", "dify:a") != "" {
		t.Fatalf("turns %+v, alice %q, bob %q", c.Turns, get("alice", "dify:a"), get("bob", "dify:a"))
	}
	for i := range maxSessions {
		if err := s.SetSession(ctx, "b1", "group", fmt.Sprintf("u%d", i), "dify:a", "x"); err != nil {
			t.Fatal(err)
		}
	}
	c, _, _ = LoadConversation(ctx, env.Store.Context(), key)
	if len(c.Sessions) != maxSessions || get("alice", "dify:b") != "" || get("u0", "dify:a") != "x" {
		t.Fatalf("%d sessions, alice's dify:b %q: want %d, the oldest dropped", len(c.Sessions), get("alice", "dify:b"), maxSessions)
	}
}
