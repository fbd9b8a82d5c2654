// Package botsettings keeps each bot's run-time settings in etcd: the
// override `botctl bots set` writes and every node watches, so that a
// bot's backend, prompt, allowlists, texts and memory change without a
// restart.
//
// Bot B's override is the key <prefix>settings/B (prefix "/botctl/", the
// cluster's) and its value a JSON document of the bot sections' keys,
// the same as a bot's entry in the config file:
//
//	{"ai": {"openai": {"system_prompt": "…"}}, "access": {"busy_text": "…"}}
//
// Precedence, field by field, lowest first: the config file's top level
// (after environment and flags), the bot's entry in the file, this
// override. A key the override does not name keeps the file's value; a
// key that names a program, a file, a variable or an endpoint is refused
// here (config.BotSettings.Override): those stay in the file.
//
// What is guaranteed: Put stores nothing that fails validation over the
// base it is given (the bot's settings from the writer's config file) and
// nothing over a change it did not see (compare-and-set on the key's
// revision). What is not: that every node's file agrees with the
// writer's; each node validates the override again over its own file (and
// builds its backend on its own machine) and, when that fails, keeps
// serving the bot with its previous settings (at start: the file's),
// saying why in its log and its status. What etcd holds never stops a
// node.
package botsettings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/etcdkv"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Dir is where the overrides live under the cluster's etcd prefix.
const Dir = etcdkeys.SettingsDir

// DefaultPrefix is the cluster's etcd prefix (pkg/node's default).
const DefaultPrefix = etcdkeys.Root

// Errors a caller acts on.
var (
	// ErrInvalid: the document is refused; the error names the key.
	ErrInvalid = errors.New("bot settings refused")
	// ErrChanged: the stored override changed since it was read; read
	// it again and retry.
	ErrChanged = errors.New("bot settings changed meanwhile")
)

// Override is one bot's override as stored.
type Override struct {
	Bot string
	// Doc is the document (nil: none stored, or deleted).
	Doc map[string]any
	// Rev is the key's modification revision (0: none stored).
	Rev int64
}

// Key is bot's override key under prefix.
func Key(prefix, bot string) string { return etcdkeys.Layout{Root: prefix}.Setting(bot) }

// Check applies doc over base as an override from etcd and validates the
// result: what Put stores and what a node applies. The error names the
// key (config key ai.demo.paragraphs: …) and wraps ErrInvalid.
func Check(base config.BotSettings, doc map[string]any) (config.BotSettings, error) {
	s, err := base.Override(doc, true)
	if err == nil {
		err = s.Validate()
	}
	if err != nil {
		return base, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return s, nil
}

func checkBot(bot string) error {
	if bot == "" || strings.ContainsAny(bot, "/ \t\n") {
		return fmt.Errorf("%w: bot %q: want a bot id (letters, digits, '_', '.', '-')", ErrInvalid, bot)
	}
	return nil
}

// Get reads bot's override (Doc nil when none is stored).
func Get(ctx context.Context, cli *clientv3.Client, prefix, bot string) (Override, error) {
	if err := checkBot(bot); err != nil {
		return Override{}, err
	}
	resp, err := cli.Get(ctx, Key(prefix, bot))
	if err != nil {
		return Override{}, fmt.Errorf("read settings of bot %s: %w", bot, err)
	}
	if len(resp.Kvs) == 0 {
		return Override{Bot: bot}, nil
	}
	return decode(prefix, resp.Kvs[0].Key, resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

func decode(prefix string, key, value []byte, rev int64) (Override, error) {
	o := Override{Bot: strings.TrimPrefix(string(key), prefix+Dir), Rev: rev}
	if err := schema.Check(Kind, value); err != nil {
		return o, fmt.Errorf("settings of bot %s (%s, revision %d) not applied: %w", o.Bot, key, rev, err)
	}
	if err := json.Unmarshal(value, &o.Doc); err != nil {
		return o, fmt.Errorf("settings of bot %s (%s, revision %d) are not a JSON document: %w", o.Bot, key, rev, err)
	}
	if o.Doc == nil {
		o.Doc = map[string]any{}
	}
	delete(o.Doc, schema.Field) // the format's version, not a setting
	return o, nil
}

// Kind names a bot's settings in a schema.NewerError.
const Kind = "bot settings"

// List reads every override stored, and the revision read at; a value
// that is not a JSON document, or that a newer botctl wrote
// (schema.ErrNewer), is returned as an error beside the rest.
func List(ctx context.Context, cli *clientv3.Client, prefix string) ([]Override, int64, error) {
	out, rev, err := etcdkv.List(ctx, cli, prefix+Dir, decoder(prefix))
	if rev == 0 {
		return nil, 0, fmt.Errorf("read bot settings: %w", err)
	}
	return out, rev, err
}

// decoder is decode for the overrides under prefix.
func decoder(prefix string) etcdkv.Decoder[Override] {
	return func(key, value []byte, rev int64) (Override, error) { return decode(prefix, key, value, rev) }
}

// Put validates doc over base (Check) and stores it as bot's whole
// override if the key's revision is still rev (0: nothing stored). It
// returns the new revision. Refused: ErrInvalid (nothing stored) or
// ErrChanged.
func Put(ctx context.Context, cli *clientv3.Client, prefix, bot string, doc map[string]any, base config.BotSettings, rev int64) (int64, error) {
	if err := checkBot(bot); err != nil {
		return 0, err
	}
	if _, err := Check(base, doc); err != nil {
		return 0, err
	}
	raw, err := schema.Marshal(doc)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	key := Key(prefix, bot)
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, string(raw))).Commit()
	if err != nil {
		return 0, fmt.Errorf("write settings of bot %s: %w", bot, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("%w: bot %s's settings were written by someone else since they were read (revision %d); run the command again", ErrChanged, bot, rev)
	}
	return resp.Header.Revision, nil
}

// Delete removes bot's override: the bot has the file's settings again.
func Delete(ctx context.Context, cli *clientv3.Client, prefix, bot string) error {
	if err := checkBot(bot); err != nil {
		return err
	}
	if _, err := cli.Delete(ctx, Key(prefix, bot)); err != nil {
		return fmt.Errorf("delete settings of bot %s: %w", bot, err)
	}
	return nil
}

// Watch calls apply with every override stored, then with each change
// (Doc nil: deleted) as etcd reports it, until ctx ends. A watch lost
// (etcd compacted past it, a member gone) is begun again from a fresh
// read, in which every override is applied again and one gone meanwhile
// is applied as deleted. A value that is not a JSON document is logged
// and skipped (etcdkv.Watch). apply runs on Watch's goroutine; so does
// read (when not nil), after each fresh read's overrides are applied.
func Watch(ctx context.Context, cli *clientv3.Client, prefix string, apply func(Override), read func(), log zerolog.Logger) {
	etcdkv.WatchRead(ctx, cli, prefix+Dir, decoder(prefix), func(o Override) string { return o.Bot }, func(ev etcdkv.Event[Override]) {
		if ev.Deleted {
			apply(Override{Bot: ev.Name, Rev: ev.Rev})
			return
		}
		apply(ev.Record)
	}, read, "bot settings", log)
}
