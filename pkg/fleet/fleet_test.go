package fleet

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/pkg/botsettings"
	"github.com/botctl/botctl/pkg/clusterkey"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/schema"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const prefix = botsettings.DefaultPrefix

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

func key(t *testing.T, seed byte) *clusterkey.Key {
	t.Helper()
	b := make([]byte, clusterkey.Size)
	for i := range b {
		b[i] = seed ^ byte(i*7)
	}
	p := filepath.Join(t.TempDir(), "cluster.key")
	if err := os.WriteFile(p, []byte(hex.EncodeToString(b)), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := clusterkey.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const secret = "wecom-secret-0123456789"

// A bot added is read back with its secret sealed under the key, opens
// under it and under no other (the error names both keys and the file);
// a second add of one id is refused, rotate-secret changes only the
// secret and only over the record it read, remove returns what it
// removed. Nothing stored or shown holds the secret in plain text.
func TestRegistry(t *testing.T) {
	cli := client(t)
	ctx := context.Background()
	k, other := key(t, 1), key(t, 2)
	base := config.Defaults().TopSettings()
	settings, err := config.ParseSettings([]byte("access: {busy_text: 稍候}"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	b, err := New(k, "b1", "prod", "ops@example.com", settings, base, []byte(secret+"\n"), now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Add(ctx, cli, prefix, b); err != nil {
		t.Fatal(err)
	}
	if _, err := Add(ctx, cli, prefix, b); !errors.Is(err, ErrExists) {
		t.Fatalf("second add: %v, want ErrExists", err)
	}
	got, err := Get(ctx, cli, prefix, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Env != "prod" || got.Owner != "ops@example.com" || got.Rev == 0 || !got.Created.Equal(now) || got.Settings["access"] == nil {
		t.Errorf("read back %+v", got)
	}
	if s, err := got.OpenSecret(k); err != nil || s != secret {
		t.Fatalf("open: %q, %v", s, err)
	}
	var shown []string
	_, err = got.OpenSecret(other)
	if !errors.Is(err, clusterkey.ErrWrongKey) || !strings.Contains(err.Error(), "bot b1") ||
		!strings.Contains(err.Error(), fmt.Sprintf("encrypted under key %s, this node has key %s (secrets.key_file %s)", k.ID(), other.ID(), other.File())) {
		t.Errorf("another key: %v", err)
	}
	shown = append(shown, err.Error())
	_, err = got.OpenSecret(nil)
	if !errors.Is(err, clusterkey.ErrNoKey) {
		t.Errorf("no key: %v", err)
	}
	shown = append(shown, err.Error())

	// A sealed secret copied into another bot's record does not open there.
	moved := got
	moved.ID = "b2"
	if _, err := moved.OpenSecret(k); !errors.Is(err, clusterkey.ErrTampered) {
		t.Errorf("a secret moved to another bot: %v, want ErrTampered", err)
	}

	stale := got.Rev
	rot, err := RotateSecret(ctx, cli, prefix, k, "b1", []byte("new-secret-9876"), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got, err = Get(ctx, cli, prefix, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := got.OpenSecret(k); s != "new-secret-9876" || got.Owner != "ops@example.com" || !got.Created.Equal(now) || !got.Updated.Equal(now.Add(time.Hour)) || got.Rev != rot.Rev || got.Rev == stale {
		t.Errorf("after rotate: %+v", got)
	}
	if _, err := RotateSecret(ctx, cli, prefix, k, "nope", []byte("x"), now); !errors.Is(err, ErrNotFound) {
		t.Errorf("rotate of a bot not registered: %v", err)
	}

	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		shown = append(shown, string(kv.Value))
	}
	raw, _ := json.Marshal(got)
	shown = append(shown, string(raw), got.String(), fmt.Sprintf("%v %+v", got, got))
	for _, text := range shown {
		if strings.Contains(text, secret) || strings.Contains(text, "new-secret-9876") {
			t.Errorf("the secret shows: %s", text)
		}
	}

	all, _, err := List(ctx, cli, prefix)
	if err != nil || len(all) != 1 || all[0].ID != "b1" {
		t.Fatalf("list: %v, %v", all, err)
	}
	gone, err := Remove(ctx, cli, prefix, "b1")
	if err != nil || gone.ID != "b1" {
		t.Fatalf("remove: %+v, %v", gone, err)
	}
	if _, err := Remove(ctx, cli, prefix, "b1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second remove: %v, want ErrNotFound", err)
	}
	if _, err := Get(ctx, cli, prefix, "b1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get after remove: %v", err)
	}
}

// New refuses a bad id, an empty secret, settings that do not pass
// botsettings.Check, and sealing without a key: each naming what to fix.
func TestNewRefuses(t *testing.T) {
	k := key(t, 1)
	base := config.Defaults().TopSettings()
	bad, err := config.ParseSettings([]byte("memory: {bytes: 12}"))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := config.ParseSettings([]byte("ai: {kind: exec, exec: {command: [/bin/sh]}}"))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		k        *clusterkey.Key
		bot      string
		settings map[string]any
		secret   string
		want     error
		says     string
	}{
		"slash in id":  {k, "a/b", nil, secret, ErrInvalid, "bot id"},
		"empty id":     {k, "", nil, secret, ErrInvalid, "bot id"},
		"empty secret": {k, "b1", nil, " \n", ErrInvalid, "secret is empty"},
		"bad settings": {k, "b1", bad, secret, ErrInvalid, "memory.bytes"},
		"a program":    {k, "b1", prog, secret, ErrInvalid, "ai.exec.command"},
		"no key":       {nil, "b1", nil, secret, clusterkey.ErrNoKey, "secrets.key_file"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.k, tc.bot, "", "", tc.settings, base, []byte(tc.secret), time.Now())
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("got %v, want %v saying %q", err, tc.want, tc.says)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows the secret: %v", err)
			}
		})
	}
}

// A value under bots/ that is not a record is an error naming the key,
// beside the records that are, and does not quote the value.
func TestListSkipsBadValue(t *testing.T) {
	cli := client(t)
	ctx := context.Background()
	k := key(t, 1)
	b, _ := New(k, "b1", "", "", nil, config.Defaults().TopSettings(), []byte(secret), time.Now())
	if _, err := Add(ctx, cli, prefix, b); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, Key(prefix, "b2"), "not json "+secret); err != nil {
		t.Fatal(err)
	}
	all, _, err := List(ctx, cli, prefix)
	if len(all) != 1 || all[0].ID != "b1" {
		t.Errorf("list: %v", all)
	}
	if err == nil || !strings.Contains(err.Error(), Key(prefix, "b2")) || strings.Contains(err.Error(), secret) {
		t.Errorf("bad value: %v", err)
	}
}

// A record a newer botctl wrote is not read: Get and List name both
// versions and the key, and List still returns the rest.
func TestNewerRecordNotRead(t *testing.T) {
	cli := client(t)
	ctx := context.Background()
	k := key(t, 1)
	for _, id := range []string{"b1", "b2"} {
		b, _ := New(k, id, "", "", nil, config.Defaults().TopSettings(), []byte(secret), time.Now())
		if _, err := Add(ctx, cli, prefix, b); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cli.Get(ctx, Key(prefix, "b2"))
	if err != nil {
		t.Fatal(err)
	}
	own := `{"v":` + strconv.Itoa(schema.Version) + `,`
	raw := string(resp.Kvs[0].Value)
	if !strings.HasPrefix(raw, own) {
		t.Fatalf("record not stamped: %.30s", raw)
	}
	if _, err := cli.Put(ctx, Key(prefix, "b2"), `{"v":`+strconv.Itoa(schema.Version+1)+`,`+raw[len(own):]); err != nil {
		t.Fatal(err)
	}
	want := "bot record has schema version " + strconv.Itoa(schema.Version+1) + ", this node knows up to " + strconv.Itoa(schema.Version)
	if _, err := Get(ctx, cli, prefix, "b2"); !errors.Is(err, schema.ErrNewer) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), secret) {
		t.Fatalf("Get: %v, want %q", err, want)
	}
	all, _, err := List(ctx, cli, prefix)
	if len(all) != 1 || all[0].ID != "b1" || !errors.Is(err, schema.ErrNewer) || !strings.Contains(err.Error(), Key(prefix, "b2")) {
		t.Fatalf("List: %v, %v", all, err)
	}
}
