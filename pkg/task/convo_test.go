package task

import (
	"context"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/natscount"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
)

// AppendExchangeFrom appends from the conversation the prompt read, with
// no second read when nobody wrote it since; when somebody did, it reads
// again and keeps both turns.
func TestAppendExchangeFromReadsOnlyWhenSomebodyWrote(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	ctx := context.Background()
	kv := env.Store.Context()
	key := jetstream.ConversationKey("b1", "alice")
	mem := Memory{Turns: 20, Bytes: 1 << 14}
	// The conversation bucket's reads, counted in the order the test's
	// connection sent them (natscount): Load and Reset count every read
	// sent before them, which the subscriptions hear after it returned.
	reads := natscount.New(t, env.Conn, env.Conn, []string{"$JS.API.DIRECT.GET.KV_BOTCTL_CONTEXT", "$JS.API.DIRECT.GET.KV_BOTCTL_CONTEXT.>", "$JS.API.STREAM.MSG.GET.KV_BOTCTL_CONTEXT"}, nil)
	read := func() (*Conversation, uint64) {
		t.Helper()
		c, rev, err := LoadConversation(ctx, kv, key)
		if err != nil {
			t.Fatal(err)
		}
		return c, rev
	}

	c, rev := read() // none yet: the append creates it
	reads.Reset()
	if err := AppendExchangeFrom(ctx, kv, key, "q1", "a1", mem, time.Now(), c, rev); err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n != 0 {
		t.Fatalf("%d reads for an append from a fresh read", n)
	}
	c, rev = read()
	// Another answer of the chat is appended meanwhile (its one read
	// counted before the count is reset): the stale start is read again,
	// and neither turn is lost.
	if err := AppendExchange(ctx, kv, key, "q2", "a2", mem, time.Now()); err != nil {
		t.Fatal(err)
	}
	reads.Reset()
	if err := AppendExchangeFrom(ctx, kv, key, "q3", "a3", mem, time.Now(), c, rev); err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n == 0 {
		t.Fatal("a stale start was not read again")
	}
	got, _ := read()
	if len(got.Turns) != 6 || got.Turns[0].Content != "q1" || got.Turns[2].Content != "q2" || got.Turns[4].Content != "q3" {
		t.Fatalf("turns %+v, want q1 a1 q2 a2 q3 a3", got.Turns)
	}
	if len(c.Turns) != 2 {
		t.Fatalf("the caller's copy changed: %+v", c.Turns)
	}
}
