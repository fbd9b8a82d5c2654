package fleet

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/rs/zerolog"
)

// Watch hands every record stored, then each add, change and removal;
// a value that is not a record is skipped.
func TestWatch(t *testing.T) {
	cli := client(t)
	ctx := context.Background()
	k := key(t, 1)
	add := func(bot string) {
		t.Helper()
		b, err := New(k, bot, "", "", nil, config.Defaults().TopSettings(), []byte(secret), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Add(ctx, cli, prefix, b); err != nil {
			t.Fatal(err)
		}
	}
	add("before")

	var mu sync.Mutex
	seen := map[string]Change{}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Watch(wctx, cli, prefix, func(c Change) { mu.Lock(); seen[c.Bot.ID] = c; mu.Unlock() }, zerolog.Nop())
	}()
	t.Cleanup(func() { stop(); <-done })
	change := func(bot string) (Change, bool) { mu.Lock(); defer mu.Unlock(); c, ok := seen[bot]; return c, ok }

	testwait.Eventually(t, 30*time.Second, "the stored record read", func() bool { c, ok := change("before"); return ok && !c.Removed })
	add("b1")
	testwait.Eventually(t, 30*time.Second, "b1's add watched", func() bool { c, ok := change("b1"); return ok && !c.Removed })
	first, _ := change("b1")
	rot, err := RotateSecret(ctx, cli, prefix, k, "b1", []byte("new"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "b1's new secret watched", func() bool { c, _ := change("b1"); return c.Bot.Rev == rot.Rev })
	if c, _ := change("b1"); c.Bot.Secret.KeyID != k.ID() || string(c.Bot.Secret.Data) == string(first.Bot.Secret.Data) {
		t.Errorf("b1 after rotate-secret: %v", c.Bot)
	}
	if _, err := cli.Put(ctx, Key(prefix, "bad"), "not a record"); err != nil {
		t.Fatal(err)
	}
	if _, err := Remove(ctx, cli, prefix, "b1"); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "b1's removal watched", func() bool { c, _ := change("b1"); return c.Removed })
	if _, ok := change("bad"); ok {
		t.Errorf("a value that is not a record was applied")
	}
}
