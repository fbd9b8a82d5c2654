package botsettings

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func client(t *testing.T) *clientv3.Client {
	t.Helper()
	e := testenv.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Put stores only what passes Check, and only over the revision it read;
// Watch hands every override stored, then each change, and skips a value
// that is not a document.
func TestPutCheckedAndWatched(t *testing.T) {
	cli := client(t)
	ctx := context.Background()
	base := config.Defaults().TopSettings()
	doc := func(s string) map[string]any {
		m, err := config.ParseSettings([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	rev, err := Put(ctx, cli, DefaultPrefix, "b1", doc("access: {busy_text: one}"), base, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Put(ctx, cli, DefaultPrefix, "b1", doc("access: {busy_text: two}"), base, 0); !errors.Is(err, ErrChanged) {
		t.Fatalf("a write over a revision not read: %v, want ErrChanged", err)
	}
	if _, err := Put(ctx, cli, DefaultPrefix, "b1", doc("memory: {bytes: 12}"), base, rev); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "memory.bytes") {
		t.Fatalf("bad settings: %v, want ErrInvalid naming memory.bytes", err)
	}
	if _, err := Put(ctx, cli, DefaultPrefix, "a/b", doc("{}"), base, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bot id with a slash: %v", err)
	}

	var mu sync.Mutex
	seen := map[string]Override{}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Watch(wctx, cli, DefaultPrefix, func(o Override) { mu.Lock(); seen[o.Bot] = o; mu.Unlock() }, zerolog.Nop())
	}()
	t.Cleanup(func() { stop(); <-done })
	busy := func(bot string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		o, ok := seen[bot]
		if !ok || o.Doc == nil {
			return "", ok
		}
		s, err := Check(base, o.Doc)
		if err != nil {
			return "invalid", true
		}
		return s.Access.BusyText, true
	}
	testwait.Eventually(t, 30*time.Second, "b1's override read", func() bool { b, _ := busy("b1"); return b == "one" })
	if _, err := cli.Put(ctx, Key(DefaultPrefix, "b2"), "not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := Put(ctx, cli, DefaultPrefix, "b1", doc("access: {busy_text: two}"), base, rev); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "b1's change watched", func() bool { b, _ := busy("b1"); return b == "two" })
	if _, ok := busy("b2"); ok {
		t.Errorf("a value that is not a document was applied")
	}
	if err := Delete(ctx, cli, DefaultPrefix, "b1"); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "b1's deletion watched", func() bool { b, ok := busy("b1"); return ok && b == "" })
}
