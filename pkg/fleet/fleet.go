// Package fleet is the bot registry: the bots kept as data in etcd, which
// `botctl bots add`, `remove`, `list` and `rotate-secret` write and read,
// beside the bots of the config file.
//
// Bot B's record is the key <prefix>bots/B (prefix "/botctl/", the
// cluster's), its value a JSON document:
//
//	{"id": "b1", "env": "prod", "owner": "ops@example.com",
//	 "settings": {"access": {"busy_text": "…"}},
//	 "secret": {"key_id": "6f103f3d", "nonce": "…", "data": "…"},
//	 "created": "…", "updated": "…"}
//
// The secret is sealed (AES-256-GCM) under the cluster key of
// secrets.key_file (pkg/clusterkey), the bot id authenticated with it; it
// is never stored, logged or shown in plain text, and no error, String
// or JSON of a Bot holds it. Settings are the record's own sections, as a
// bot's entry in the config file has them, checked as an override from
// etcd is (botsettings.Check: no key that names a program, a file, a
// variable or an endpoint).
//
// What is guaranteed: Add creates a record only where none is (two adds
// of one id: one wins, the other gets ErrExists); RotateSecret acts only
// on the record it read (compare-and-set on its revision), so a change
// made meanwhile is not lost silently. A node reads the registry at its
// start (WithRegistry), then follows its changes while it runs
// (Follower): a bot added is campaigned for, a bot removed drained and
// dropped, each within a few seconds. See docs/bots.md, "Bots as data".
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/botsettings"
	"github.com/botctl/botctl/pkg/clusterkey"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/etcdkv"
	"github.com/botctl/botctl/pkg/schema"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Dir is where the records live under the cluster's etcd prefix.
const Dir = etcdkeys.BotsDir

// Errors a caller acts on.
var (
	// ErrInvalid: the record is refused (a bad id, empty secret, bad
	// settings); the error names what and how to fix it.
	ErrInvalid = errors.New("bot record refused")
	// ErrExists: a bot of that id is registered already.
	ErrExists = errors.New("bot already registered")
	// ErrNotFound: no bot of that id is registered.
	ErrNotFound = errors.New("bot not registered")
	// ErrChanged: the record changed since it was read; read it again.
	ErrChanged = errors.New("bot record changed meanwhile")
)

// Bot is one registered bot as stored. It holds its secret sealed only.
type Bot struct {
	ID string `json:"id"`
	// Env, if set, is the environment whose nodes may serve the bot.
	Env string `json:"env,omitempty"`
	// Owner is who answers for the bot (as bots[].owner).
	Owner string `json:"owner,omitempty"`
	// Settings are the bot's own sections (ai, access, memory, limits),
	// as in a bot's entry of the config file; nil: the top level's.
	Settings map[string]any `json:"settings,omitempty"`
	// Secret is the bot's WeCom secret, sealed under the cluster key.
	Secret  clusterkey.Sealed `json:"secret"`
	Created time.Time         `json:"created"`
	Updated time.Time         `json:"updated"`
	// Rotation is the outcome of the latest rotate-secret; nil: none.
	Rotation *Rotation `json:"rotation,omitempty"`
	// Rev is the key's modification revision (not stored).
	Rev int64 `json:"-"`
}

// The states of a Rotation.
const (
	// RotationPending: the new secret is stored, not yet proved by a
	// subscribe on the node that leads the bot.
	RotationPending = "pending"
	// RotationProved: WeCom accepted it; the bot's connection uses it.
	RotationProved = "proved"
	// RotationRefused: WeCom refused it (Error); the old secret is back
	// in Secret, and the connection held was kept.
	RotationRefused = "refused"
)

// Rotation is a rotate-secret's course: pending, then proved or refused
// by the node that leads the bot (Node, At).
type Rotation struct {
	State string `json:"state"`
	// Previous is the secret before, sealed, while pending: what a refusal
	// restores.
	Previous *clusterkey.Sealed `json:"previous,omitempty"`
	// Error is WeCom's refusal (never a secret).
	Error string    `json:"error,omitempty"`
	Node  string    `json:"node,omitempty"`
	At    time.Time `json:"at"`
}

// String names the bot and the key its secret is sealed under, never the
// secret.
func (b Bot) String() string {
	return fmt.Sprintf("bot %s (env %q, owner %q, secret %s)", b.ID, b.Env, b.Owner, b.Secret)
}

// Key is bot's record key under prefix.
func Key(prefix, bot string) string { return etcdkeys.Layout{Root: prefix}.Bot(bot) }

// CheckID refuses an id that cannot be a key of its own under Dir.
func CheckID(bot string) error {
	if bot == "" || strings.ContainsAny(bot, "/ \t\n\r") || bot == "." || bot == ".." {
		return fmt.Errorf("%w: bot id %q: want letters, digits, '_', '.', '-' (no '/', no space)", ErrInvalid, bot)
	}
	return nil
}

// OpenSecret decrypts the bot's secret under k: clusterkey.ErrNoKey,
// ErrWrongKey (naming both keys and the key file) or ErrTampered, each
// with the bot named.
func (b Bot) OpenSecret(k *clusterkey.Key) (string, error) {
	s, err := k.Open(b.Secret, []byte(b.ID))
	if err != nil {
		return "", fmt.Errorf("secret of bot %s: %w", b.ID, err)
	}
	return string(s), nil
}

// sealSecret seals secret for bot under k.
func sealSecret(k *clusterkey.Key, bot string, secret []byte) (clusterkey.Sealed, error) {
	if len(strings.TrimSpace(string(secret))) == 0 {
		return clusterkey.Sealed{}, fmt.Errorf("%w: bot %s: the secret is empty: give the file that holds the bot's WeCom secret", ErrInvalid, bot)
	}
	s, err := k.Seal(secret, []byte(bot))
	if err != nil {
		return s, fmt.Errorf("secret of bot %s: %w", bot, err)
	}
	return s, nil
}

// New makes bot's record: secret sealed under k (surrounding white space
// trimmed, as a secret_file's), settings checked over base (the top-level
// settings of the writer's config file). Refused: ErrInvalid, or k's
// errors (clusterkey.ErrNoKey).
func New(k *clusterkey.Key, bot, env, owner string, settings map[string]any, base config.BotSettings, secret []byte, now time.Time) (Bot, error) {
	if err := CheckID(bot); err != nil {
		return Bot{}, err
	}
	if len(settings) > 0 {
		if _, err := botsettings.Check(base, settings); err != nil {
			return Bot{}, fmt.Errorf("%w: bot %s: settings: %w", ErrInvalid, bot, err)
		}
	}
	sealed, err := sealSecret(k, bot, []byte(strings.TrimSpace(string(secret))))
	if err != nil {
		return Bot{}, err
	}
	now = now.UTC()
	return Bot{ID: bot, Env: env, Owner: owner, Settings: settings, Secret: sealed, Created: now, Updated: now}, nil
}

// Add stores b if no bot of its id is registered (ErrExists otherwise),
// and returns the revision it was stored at.
func Add(ctx context.Context, cli *clientv3.Client, prefix string, b Bot) (int64, error) {
	if err := CheckID(b.ID); err != nil {
		return 0, err
	}
	raw, err := schema.Marshal(b)
	if err != nil {
		return 0, fmt.Errorf("encode bot %s: %w", b.ID, err)
	}
	key := Key(prefix, b.ID)
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(raw))).Commit()
	if err != nil {
		return 0, fmt.Errorf("register bot %s: %w", b.ID, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("%w: bot %s is registered already (%s): remove it first, or use rotate-secret to change its secret", ErrExists, b.ID, key)
	}
	return resp.Header.Revision, nil
}

// Get reads bot's record (ErrNotFound when none).
func Get(ctx context.Context, cli *clientv3.Client, prefix, bot string) (Bot, error) {
	if err := CheckID(bot); err != nil {
		return Bot{}, err
	}
	resp, err := cli.Get(ctx, Key(prefix, bot))
	if err != nil {
		return Bot{}, fmt.Errorf("read bot %s: %w", bot, err)
	}
	if len(resp.Kvs) == 0 {
		return Bot{}, fmt.Errorf("%w: bot %s (%s): see botctl bots list", ErrNotFound, bot, Key(prefix, bot))
	}
	return decode(prefix, resp.Kvs[0].Key, resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

// Kind names a bot's registry record in a schema.NewerError.
const Kind = "bot record"

// decode reads a stored record; its errors never quote the value. A
// record a newer botctl wrote is an error that wraps schema.ErrNewer.
func decode(prefix string, key, value []byte, rev int64) (Bot, error) {
	id := strings.TrimPrefix(string(key), prefix+Dir)
	if err := schema.Check(Kind, value); err != nil {
		return Bot{ID: id, Rev: rev}, fmt.Errorf("bot %s (%s, revision %d) not read: %w", id, key, rev, err)
	}
	var b Bot
	if err := json.Unmarshal(value, &b); err != nil {
		return Bot{ID: id, Rev: rev}, fmt.Errorf("bot %s (%s, revision %d) is not a bot record: %v", id, key, rev, jsonProblem(err))
	}
	if b.ID != id {
		return Bot{ID: id, Rev: rev}, fmt.Errorf("bot %s (%s, revision %d) holds the record of bot %q", id, key, rev, b.ID)
	}
	b.Rev = rev
	return b, nil
}

// jsonProblem says what is wrong with a document without quoting it (a
// syntax error's offset, a type error's field).
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("not JSON (at byte %d)", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %s is not a %s", typ.Field, typ.Type)
	}
	return "not a JSON object"
}

// List reads every record, sorted by id, and the revision read at; a
// value that is not a record is returned as an error beside the rest.
func List(ctx context.Context, cli *clientv3.Client, prefix string) ([]Bot, int64, error) {
	out, rev, err := etcdkv.List(ctx, cli, prefix+Dir, decoder(prefix))
	if rev == 0 {
		return nil, 0, fmt.Errorf("read the bot registry: %w", err)
	}
	return out, rev, err
}

// decoder is decode for the records under prefix.
func decoder(prefix string) etcdkv.Decoder[Bot] {
	return func(key, value []byte, rev int64) (Bot, error) { return decode(prefix, key, value, rev) }
}

// RotateSecret seals secret under k as bot's new secret, if its record is
// still the one read (ErrChanged otherwise), and returns the record
// stored. The record's other fields are kept; its Rotation is pending,
// the secret before kept in it, until the node that leads the bot proves
// the new one (SettleRotation).
func RotateSecret(ctx context.Context, cli *clientv3.Client, prefix string, k *clusterkey.Key, bot string, secret []byte, now time.Time) (Bot, error) {
	b, err := Get(ctx, cli, prefix, bot)
	if err != nil {
		return Bot{}, err
	}
	sealed, err := sealSecret(k, bot, []byte(strings.TrimSpace(string(secret))))
	if err != nil {
		return Bot{}, err
	}
	prev := b.Secret
	if b.Rotation != nil && b.Rotation.State == RotationPending && b.Rotation.Previous != nil {
		prev = *b.Rotation.Previous // the last secret proved or kept, not one never proved
	}
	b.Secret, b.Updated = sealed, now.UTC()
	b.Rotation = &Rotation{State: RotationPending, Previous: &prev, At: now.UTC()}
	raw, err := schema.Marshal(b)
	if err != nil {
		return Bot{}, fmt.Errorf("encode bot %s: %w", bot, err)
	}
	key := Key(prefix, bot)
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", b.Rev)).Then(clientv3.OpPut(key, string(raw))).Commit()
	if err != nil {
		return Bot{}, fmt.Errorf("store the secret of bot %s: %w", bot, err)
	}
	if !resp.Succeeded {
		return Bot{}, fmt.Errorf("%w: bot %s was changed or removed since it was read (revision %d); run the command again", ErrChanged, bot, b.Rev)
	}
	b.Rev = resp.Header.Revision
	return b, nil
}

// Remove deletes bot's record (ErrNotFound when none) and returns the
// record removed.
func Remove(ctx context.Context, cli *clientv3.Client, prefix, bot string) (Bot, error) {
	if err := CheckID(bot); err != nil {
		return Bot{}, err
	}
	resp, err := cli.Delete(ctx, Key(prefix, bot), clientv3.WithPrevKV())
	if err != nil {
		return Bot{}, fmt.Errorf("remove bot %s: %w", bot, err)
	}
	if len(resp.PrevKvs) == 0 {
		return Bot{}, fmt.Errorf("%w: bot %s (%s): see botctl bots list", ErrNotFound, bot, Key(prefix, bot))
	}
	b, _ := decode(prefix, resp.PrevKvs[0].Key, resp.PrevKvs[0].Value, resp.PrevKvs[0].ModRevision)
	return b, nil
}
