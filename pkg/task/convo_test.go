package task

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/dataplane"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/nats-io/nats.go"
)

// AppendExchangeFrom appends from the conversation the prompt read, with
// no second read when nobody wrote it since; when somebody did, it reads
// again and keeps both turns.
func TestAppendExchangeFromReadsOnlyWhenSomebodyWrote(t *testing.T) {
	env := testenv.StartJetStream(t, dataplane.Options{})
	ctx := context.Background()
	kv := env.Store.Context()
	key := dataplane.ConversationKey("b1", "alice")
	mem := Memory{Turns: 20, Bytes: 1 << 14}
	var reads atomic.Int64
	for _, subj := range []string{"$JS.API.DIRECT.GET.KV_BOTCTL_CONTEXT", "$JS.API.DIRECT.GET.KV_BOTCTL_CONTEXT.>", "$JS.API.STREAM.MSG.GET.KV_BOTCTL_CONTEXT"} {
		sub, err := env.Conn.Subscribe(subj, func(*nats.Msg) { reads.Add(1) })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	env.Conn.Flush()
	// read reads the conversation and waits until the counter has heard
	// its request: the subscriptions hear it asynchronously, and a count
	// reset before it arrives would count it against the next step.
	read := func() (*Conversation, uint64) {
		t.Helper()
		before := reads.Load()
		c, rev, err := LoadConversation(ctx, kv, key)
		if err != nil {
			t.Fatal(err)
		}
		testwait.Eventually(t, 30*time.Second, "the read's request reaches the counter", func() bool { return reads.Load() > before })
		return c, rev
	}

	c, rev := read() // none yet: the append creates it
	reads.Store(0)
	if err := AppendExchangeFrom(ctx, kv, key, "q1", "a1", mem, time.Now(), c, rev); err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n != 0 {
		t.Fatalf("%d reads for an append from a fresh read", n)
	}
	c, rev = read()
	// Another answer of the chat is appended meanwhile (its one read
	// counted before the count is reset): the stale start is read again,
	// and neither turn is lost. The read again is awaited, not looked for
	// at once: the counter hears it after the append has returned.
	before := reads.Load()
	if err := AppendExchange(ctx, kv, key, "q2", "a2", mem, time.Now()); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "the other append's read reaches the counter", func() bool { return reads.Load() > before })
	reads.Store(0)
	if err := AppendExchangeFrom(ctx, kv, key, "q3", "a3", mem, time.Now(), c, rev); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "the stale start read again", func() bool { return reads.Load() > 0 })
	got, _ := read()
	if len(got.Turns) != 6 || got.Turns[0].Content != "q1" || got.Turns[2].Content != "q2" || got.Turns[4].Content != "q3" {
		t.Fatalf("turns %+v, want q1 a1 q2 a2 q3 a3", got.Turns)
	}
	if len(c.Turns) != 2 {
		t.Fatalf("the caller's copy changed: %+v", c.Turns)
	}
}
