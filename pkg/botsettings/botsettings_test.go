package botsettings

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/schema"
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
		Watch(wctx, cli, DefaultPrefix, func(o Override) { mu.Lock(); seen[o.Bot] = o; mu.Unlock() }, nil, zerolog.Nop())
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

// Settings a newer botctl wrote are refused with both versions named, and
// the bot keeps what it had: neither the newer document nor a deletion
// is applied. A document of the previous release (no version) is read
// as before, and the version is not read as a setting.
func TestNewerSettingsAreNotApplied(t *testing.T) {
	cli := client(t)
	ctx := context.Background()
	const prefix = "/botctl/"
	if _, err := cli.Put(ctx, Key(prefix, "old"), `{"ai":{"kind":"demo"}}`); err != nil {
		t.Fatal(err)
	}
	o, err := Get(ctx, cli, prefix, "old")
	if err != nil || len(o.Doc) != 1 {
		t.Fatalf("a document of the previous release: %+v, %v", o, err)
	}
	raw, _ := schema.Marshal(map[string]any{"ai": map[string]any{"kind": "demo"}})
	if _, err := cli.Put(ctx, Key(prefix, "b1"), string(raw)); err != nil {
		t.Fatal(err)
	}
	if o, err := Get(ctx, cli, prefix, "b1"); err != nil || o.Doc[schema.Field] != nil {
		t.Fatalf("this version's document: %+v, %v", o, err)
	}

	var mu sync.Mutex
	var applied []Override
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Watch(wctx, cli, prefix, func(o Override) { mu.Lock(); applied = append(applied, o); mu.Unlock() }, nil, zerolog.Nop())
	}()
	t.Cleanup(func() { cancel(); <-done })
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(applied) }
	testwait.Eventually(t, 10*time.Second, "both overrides applied", func() bool { return count() == 2 })

	newer := `{"v":` + strconv.Itoa(schema.Version+1) + `,"ai":{"kind":"demo"}}`
	if _, err := cli.Put(ctx, Key(prefix, "b1"), newer); err != nil {
		t.Fatal(err)
	}
	_, err = Get(ctx, cli, prefix, "b1")
	want := "bot settings has schema version " + strconv.Itoa(schema.Version+1) + ", this node knows up to " + strconv.Itoa(schema.Version)
	if !errors.Is(err, schema.ErrNewer) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Get of a newer document: %v, want %q", err, want)
	}
	// A change after it, seen by the watch, shows the newer one was passed.
	if _, err := cli.Put(ctx, Key(prefix, "old"), `{"ai":{"kind":"demo"},"reply":{}}`); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, "the later change applied", func() bool { return count() >= 3 })
	mu.Lock()
	defer mu.Unlock()
	for _, o := range applied[2:] {
		if o.Bot == "b1" {
			t.Fatalf("the newer document (or a deletion) was applied: %+v", o)
		}
	}
}
