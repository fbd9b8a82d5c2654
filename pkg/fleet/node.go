package fleet

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/botsettings"
	"github.com/botctl/botctl/pkg/clusterkey"
	"github.com/botctl/botctl/pkg/config"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// readTimeout bounds the registry's read at a node's start.
const readTimeout = 10 * time.Second

// ForNode returns the registered bots a node of env serves beside the
// config file's bots (file), as the file's entries would be, and why it
// refuses the others. A bot the file lists is the file's (the file's
// entry wins) and one registered for another env is that env's: neither
// is returned nor refused. Refused, each error naming the bot: a secret
// that does not open under k (no key, another key, an altered value: the
// error names secrets.key_file), settings that do not pass
// botsettings.Check over top, a backend that cannot be built on this
// machine.
func ForNode(records []Bot, file []config.Bot, env string, k *clusterkey.Key, top config.BotSettings) ([]config.Bot, []error) {
	inFile := map[string]bool{}
	for _, b := range file {
		inFile[b.ID] = true
	}
	var out []config.Bot
	var refused []error
	for _, r := range records {
		if inFile[r.ID] || (r.Env != "" && r.Env != env) {
			continue
		}
		if err := CheckID(r.ID); err != nil {
			refused = append(refused, err)
			continue
		}
		s, err := botsettings.Check(top, r.Settings)
		if err != nil {
			refused = append(refused, fmt.Errorf("registered bot %s: settings: %w", r.ID, err))
			continue
		}
		if !reflect.DeepEqual(s.AI, top.AI) {
			if _, err := ai.New(s.AI); err != nil {
				refused = append(refused, fmt.Errorf("registered bot %s: its AI backend cannot be built on this node: %w", r.ID, err))
				continue
			}
		}
		secret, err := r.OpenSecret(k)
		if err != nil {
			refused = append(refused, fmt.Errorf("registered bot %s not served: %w", r.ID, err))
			continue
		}
		out = append(out, config.Bot{ID: r.ID, Secret: secret, Owner: r.Owner, Settings: r.Settings})
	}
	return out, refused
}

// WithRegistry is the bots a node serves at its start: cfg's, then the
// registry's that ForNode gives it, under the cluster key of
// secrets.key_file. What etcd holds never stops a node: a registry that
// cannot be read, a key file that cannot be loaded or a bot refused is
// logged (never a secret), and the node serves the rest.
func WithRegistry(ctx context.Context, cli *clientv3.Client, prefix string, cfg config.Config, log zerolog.Logger) []config.Bot {
	if cli == nil {
		return cfg.Bots
	}
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	records, _, err := List(rctx, cli, prefix)
	cancel()
	if err != nil {
		log.Error().Err(err).Msg("bot registry not read in full: the config file's bots are served, and the registry's read")
	}
	if len(records) == 0 {
		return cfg.Bots
	}
	var k *clusterkey.Key
	if cfg.Secrets.KeyFile != "" {
		if k, err = clusterkey.Load(cfg.Secrets.KeyFile); err != nil {
			log.Error().Err(err).Msg("cluster key not loaded: the registry's bots are not served")
		}
	}
	add, refused := ForNode(records, cfg.Bots, cfg.Env, k, cfg.TopSettings())
	for _, err := range refused {
		log.Error().Err(err).Msg("registered bot not served")
	}
	for _, b := range add {
		log.Info().Str("bot", b.ID).Msg("serving registered bot (bot registry in etcd)")
	}
	return append(append([]config.Bot(nil), cfg.Bots...), add...)
}
