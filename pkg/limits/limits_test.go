package limits

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func admit(t *testing.T, c *Counters, bot, user string, l Limits) string {
	t.Helper()
	over, err := c.Admit(context.Background(), bot, user, l)
	if err != nil {
		t.Fatal(err)
	}
	return over
}

func TestMessagesPerMinuteAndDayUTC(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	clk := &clock{t: time.Date(2026, 12, 4, 23, 58, 10, 0, time.UTC)}
	c := New(env.Store.Limits(), clk.now)
	l := Limits{User: Set{MessagesPerMinute: 2, MessagesPerDay: 3}}

	for i := range 2 {
		if over := admit(t, c, "b1", "alice", l); over != "" {
			t.Fatalf("message %d: over %s, want admitted", i+1, over)
		}
	}
	if over := admit(t, c, "b1", "alice", l); over != UserMessagesPerMinute {
		t.Fatalf("third message in a minute: %q, want %s", over, UserMessagesPerMinute)
	}
	// Another user has counts of their own.
	if over := admit(t, c, "b1", "bob.smith@x", l); over != "" {
		t.Fatalf("another user: over %s", over)
	}
	clk.set(clk.now().Add(time.Minute)) // 23:59:10: a new minute, the same day
	if over := admit(t, c, "b1", "alice", l); over != "" {
		t.Fatalf("next minute: over %s, want admitted", over)
	}
	if over := admit(t, c, "b1", "alice", l); over != UserMessagesPerDay {
		t.Fatalf("fourth message of the day: %q, want %s", over, UserMessagesPerDay)
	}
	use, err := c.Read(context.Background(), UserKey("b1", "alice"))
	if err != nil {
		t.Fatal(err)
	}
	if use.Messages != 3 || use.MinuteMessages != 1 {
		t.Fatalf("counts %+v: want 3 today (refusals not counted), 1 this minute", use)
	}
	clk.set(clk.now().Add(time.Minute)) // 00:00:10 UTC: a new day
	if over := admit(t, c, "b1", "alice", l); over != "" {
		t.Fatalf("a new UTC day: over %s, want admitted", over)
	}
}

// The bot-wide limit counts every user's messages; a message it refuses
// is not counted for its user either.
func TestBotLimitSharedAndUserCountGivenBack(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	c := New(env.Store.Limits(), nil)
	l := Limits{User: Set{MessagesPerDay: 10}, Bot: Set{MessagesPerDay: 2}}
	if admit(t, c, "b1", "u1", l) != "" || admit(t, c, "b1", "u2", l) != "" {
		t.Fatal("first two messages of the bot refused")
	}
	if over := admit(t, c, "b1", "u3", l); over != BotMessagesPerDay {
		t.Fatalf("third message of the bot: %q, want %s", over, BotMessagesPerDay)
	}
	use, err := c.Read(context.Background(), UserKey("b1", "u3"))
	if err != nil {
		t.Fatal(err)
	}
	if use.Messages != 0 {
		t.Fatalf("u3's count %d after the bot refused its message: want 0", use.Messages)
	}
	// Another bot has its own.
	if over := admit(t, c, "b2", "u3", l); over != "" {
		t.Fatalf("another bot: over %s", over)
	}
}

// Two nodes' counters on one bucket (a leader and the next one after a
// failover) count together, and concurrent admissions never exceed the
// limit.
func TestSharedAcrossCountersConcurrently(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	a, b := New(env.Store.Limits(), nil), New(env.Store.Limits(), nil)
	l := Limits{Bot: Set{MessagesPerDay: 25}}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 40 {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Go(func() {
			over, err := c.Admit(context.Background(), "b1", "u", l)
			if err != nil {
				t.Error(err)
			}
			if over == "" {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 25 {
		t.Fatalf("%d admitted of 40 by two counters: want exactly 25", got)
	}
}

func TestTokensPerDay(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	c := New(env.Store.Limits(), nil)
	l := Limits{User: Set{TokensPerDay: 100}}
	ctx := context.Background()
	if over := admit(t, c, "b1", "u", l); over != "" {
		t.Fatalf("no tokens yet: over %s", over)
	}
	if err := c.AddTokens(ctx, "b1", "u", 60, l); err != nil {
		t.Fatal(err)
	}
	if over := admit(t, c, "b1", "u", l); over != "" {
		t.Fatalf("60 of 100 tokens: over %s", over)
	}
	if err := c.AddTokens(ctx, "b1", "u", 40, l); err != nil {
		t.Fatal(err)
	}
	if over := admit(t, c, "b1", "u", l); over != UserTokensPerDay {
		t.Fatalf("100 of 100 tokens: %q, want %s", over, UserTokensPerDay)
	}
	// No limits: nothing read, nothing written.
	if over := admit(t, c, "b1", "other", Limits{}); over != "" {
		t.Fatal("no limits: refused")
	}
	if _, err := env.Store.Limits().Get(ctx, UserKey("b1", "other")); err == nil {
		t.Fatal("a counter written for a bot without limits")
	}
}

func admitBytes(t *testing.T, c *Counters, user string, n int64, l Limits) string {
	t.Helper()
	over, err := c.AdmitBytes(context.Background(), "b1", user, n, l)
	if err != nil {
		t.Fatal(err)
	}
	return over
}

// Files are admitted while, counted, they leave a day's bytes at most
// the limit, per user and per bot; a refusal counts nothing (a bot's
// refusal gives the user's count back), a release gives bytes back, and
// a new UTC day starts from zero.
func TestBytesPerDay(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	clk := &clock{t: time.Date(2026, 12, 4, 23, 0, 0, 0, time.UTC)}
	c := New(env.Store.Limits(), clk.now)
	l := Limits{User: Set{BytesPerDay: 1000}, Bot: Set{BytesPerDay: 1500}}
	if !l.Bytes() || l.Any() {
		t.Fatalf("Bytes %v Any %v: a byte limit alone counts files, not every message", l.Bytes(), l.Any())
	}

	if over := admitBytes(t, c, "alice", 600, l); over != "" {
		t.Fatalf("600 of 1000: over %s", over)
	}
	if over := admitBytes(t, c, "alice", 500, l); over != UserBytesPerDay {
		t.Fatalf("1100 of 1000: %q, want %s", over, UserBytesPerDay)
	}
	if over := admitBytes(t, c, "alice", 400, l); over != "" {
		t.Fatalf("exactly 1000 of 1000: over %s", over)
	}
	if over := admitBytes(t, c, "alice", 0, l); over != UserBytesPerDay {
		t.Fatalf("any more at the limit: %q, want %s", over, UserBytesPerDay)
	}
	// The bot has 500 left: bob's 600 are over it, and not counted as his.
	if over := admitBytes(t, c, "bob", 600, l); over != BotBytesPerDay {
		t.Fatalf("bot at 1600 of 1500: %q, want %s", over, BotBytesPerDay)
	}
	if use, _ := c.Read(context.Background(), UserKey("b1", "bob")); use.Bytes != 0 {
		t.Fatalf("bob's bytes after the bot's refusal: %d, want 0", use.Bytes)
	}
	if err := c.ReleaseBytes(context.Background(), "b1", "alice", 400, l); err != nil {
		t.Fatal(err)
	}
	if over := admitBytes(t, c, "bob", 500, l); over != "" {
		t.Fatalf("bot at 1100 of 1500 after a release: over %s", over)
	}
	clk.set(clk.now().Add(time.Hour)) // the next UTC day
	if over := admitBytes(t, c, "alice", 1000, l); over != "" {
		t.Fatalf("a new day: over %s", over)
	}
}
