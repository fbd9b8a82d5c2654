// Package bots holds the live settings of every bot a node serves: the
// config file's (top level, then the bot's entry), the bot registry's
// record for a bot added at run time (pkg/fleet), and over either the
// override in etcd (botctl bots set, pkg/botsettings), which it watches.
package bots

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/botsettings"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/botctl/botctl/pkg/limits"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/worker"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Live are the settings of every bot on this node as they are now: the
// config file's (top level, then the bot's entry) under the override in
// etcd (`botctl bots set`, package botsettings), which the node watches.
// The worker asks it for a task's backend and memory, the inbound path
// for a bot's allowlists and texts, the pusher for its notes. A bot's
// backend is built again only when its ai section changes; a task keeps
// the backend it started with. An override that fails here (a key this
// node's file makes invalid, a backend that cannot be built on this
// machine) is not applied: the bot keeps what it had (at start: the
// file's settings), the log says why, and the refusal is shown (GET
// /status, /readyz's warnings, botctl_bot_settings_refused). What etcd
// holds never stops a node.
type Live struct {
	cfg    config.Config
	etcd   *clientv3.Client
	prefix string
	log    zerolog.Logger

	// applying is held by apply and bind, each whole: a state built
	// unbound is never stored after bind gave every state its backend.
	applying sync.Mutex
	mu       sync.RWMutex
	// bound: JetStream is, and backends are built (bind). Before, a bot's
	// state has its rules (the inbound path runs from the start) and no
	// backend: a backend may keep state in JetStream (an agent platform's
	// conversations), and nothing asks for one before the worker starts.
	bound  bool
	aiOpts []ai.Option // bind's: what a backend keeps in JetStream
	// breakers are this node's AI circuit breakers, shared by every
	// bot's chain (kept per bot and backend); breakerWatch hears them.
	breakers     *ai.Breakers
	breakerWatch *breakerWatch
	top          *botState            // a bot neither the file nor etcd names (the demo's)
	bots         map[string]*botState // bot → its settings now
	refused      map[string]Refusal   // bot → its last override not applied, while it is the latest seen
	// read is closed once every override etcd held has been read and
	// applied (New's read, or the watch's first): see Read.
	read     chan struct{}
	readOnce sync.Once
}

// Refusal is an override this node did not apply, and why.
type Refusal struct {
	Rev int64
	Why string
}

// botState is one bot's settings and what is built of them.
type botState struct {
	settings config.BotSettings
	backend  ai.Backend
	rules    *access.Rules
	rev      int64 // the override applied (0: the file's settings)
}

// New builds every configured bot's rules from the file (an error
// stops the node, as a bad top level does), then applies the overrides
// etcd holds now, so that the first message is answered with them (etcd
// not answering within a few seconds: the file's, until the watch reads
// them). The backends are built by bind.
func New(ctx context.Context, cfg config.Config, cli *clientv3.Client, log zerolog.Logger) (*Live, error) {
	b := &Live{cfg: cfg, etcd: cli, prefix: botsettings.DefaultPrefix, log: log.With().Str("component", "bot_settings").Logger(),
		bots: map[string]*botState{}, refused: map[string]Refusal{}, read: make(chan struct{})}
	b.breakerWatch = &breakerWatch{log: log.With().Str("component", "ai_breakers").Logger()}
	b.breakers = ai.NewBreakers(b.breakerWatch, nil)
	var err error
	if b.top, err = b.build(cfg.TopSettings(), nil, 0); err != nil {
		return nil, err
	}
	for i, bot := range cfg.Bots {
		s, err := cfg.BotSettings(bot.ID)
		if err != nil {
			return nil, err
		}
		st, err := b.build(s, b.top, 0)
		if err != nil {
			return nil, fmt.Errorf("bots[%d] (%s): %w", i, bot.ID, err)
		}
		b.bots[bot.ID] = st
	}
	if cli != nil {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		all, rev, err := botsettings.List(rctx, cli, b.prefix)
		if err != nil {
			b.log.Warn().Err(err).Msg("bot settings not all read from etcd at start; this node leads no bot until the watch reads them")
		}
		for _, o := range all {
			b.apply(o)
		}
		if rev != 0 {
			b.markRead()
		}
	} else {
		b.markRead()
	}
	return b, nil
}

// Read is closed once every override etcd held has been read and applied
// (or refused): from then on a bot's settings are never the config file's
// alone when etcd holds an override for it. Until then the node must not
// take a bot's messages (an override may narrow its allowlists). A value
// etcd holds that cannot be decoded does not keep it open: that bot keeps
// its file's settings, logged.
func (b *Live) Read() <-chan struct{} { return b.read }

func (b *Live) markRead() { b.readOnce.Do(func() { close(b.read) }) }

// Bind builds every bot's backend with opts, once JetStream is bound
// (before the worker starts). What etcd holds never stops the
// node: a bot whose override's backend cannot be built here runs with the
// config file's settings, and the override is recorded as refused
// (Refusal, Views). Only a backend of the file's own settings that cannot
// be built stops the node, naming the bot. h hears when all of a bot's
// backends are down.
func (b *Live) Bind(h *health.Health, opts ...ai.Option) error {
	b.applying.Lock()
	defer b.applying.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.breakerWatch.health.Store(h)
	b.aiOpts = append(slices.Clip(opts), ai.WithBreakers(b.breakers))
	var err error
	if b.top.backend, err = b.backend(b.top.settings.AI); err != nil {
		return err
	}
	for bot, st := range b.bots {
		if reflect.DeepEqual(st.settings.AI, b.top.settings.AI) {
			st.backend = b.top.backend
			continue
		}
		if st.backend, err = b.backend(st.settings.AI); err == nil {
			continue
		}
		if st.rev == 0 {
			return fmt.Errorf("bot %s: %w", bot, err)
		}
		file, ferr := b.fileState(bot)
		if ferr != nil {
			return fmt.Errorf("bot %s: %w", bot, ferr)
		}
		b.bots[bot] = file
		b.refused[bot] = Refusal{Rev: st.rev, Why: err.Error()}
		b.log.Error().Err(err).Str("bot", bot).Int64("revision", st.rev).
			Msg("bot settings from etcd not applied at start: the backend cannot be built on this node; the bot runs with the config file's settings (botctl bots show --bot " + bot + ")")
	}
	b.bound = true
	return nil
}

// fileState is bot's state of the config file's settings, its backend
// built (top's when the ai sections are the same); b.mu is held by the
// caller, which has set aiOpts.
func (b *Live) fileState(bot string) (*botState, error) {
	s, err := b.cfg.BotSettings(bot)
	if err != nil {
		return nil, err
	}
	st, err := b.rules(s, 0)
	if err != nil {
		return nil, err
	}
	if reflect.DeepEqual(s.AI, b.top.settings.AI) {
		st.backend = b.top.backend
	} else if st.backend, err = b.backend(s.AI); err != nil {
		return nil, err
	}
	return st, nil
}

// backend builds one backend: the one place a node makes them.
func (b *Live) backend(cfg config.AI) (ai.Backend, error) { return ai.New(cfg, b.aiOpts...) }

// build makes s's rules and, once bound, its backend (like's, when s's ai
// section is like's).
func (b *Live) build(s config.BotSettings, like *botState, rev int64) (*botState, error) {
	st, err := b.rules(s, rev)
	if err != nil {
		return nil, err
	}
	b.mu.RLock()
	bound := b.bound
	b.mu.RUnlock()
	switch {
	case !bound:
	case like != nil && like.backend != nil && reflect.DeepEqual(like.settings.AI, s.AI):
		st.backend = like.backend
	default:
		if st.backend, err = b.backend(s.AI); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// rules is s's state without a backend: its rules made.
func (b *Live) rules(s config.BotSettings, rev int64) (*botState, error) {
	a := s.Access
	rules, err := access.NewRules(access.Rules{AllowUsers: a.AllowUsers, AllowChats: a.AllowChats, MaxQuestionBytes: a.MaxQuestionBytes,
		Texts:  access.Texts{Receipt: a.ReceiptText, Busy: a.BusyText, Unsupported: a.UnsupportedText, Welcome: a.WelcomeText, WelcomeCard: a.WelcomeCard, Limit: a.LimitText, Version: a.ReportedVersion},
		Limits: limitsOf(s.Limits)})
	if err != nil {
		return nil, err
	}
	return &botState{settings: s, rev: rev, rules: rules}, nil
}

// Watch applies every change of the overrides until ctx ends.
func (b *Live) Watch(ctx context.Context) {
	if b.etcd != nil {
		botsettings.Watch(ctx, b.etcd, b.prefix, b.apply, b.markRead, b.log)
	}
}

// apply makes o the bot's override: over the file's settings of the bot,
// checked, built, then swapped in; on any error the bot keeps what it has.
func (b *Live) apply(o botsettings.Override) {
	b.applying.Lock()
	defer b.applying.Unlock()
	log := b.log.With().Str("bot", o.Bot).Int64("revision", o.Rev).Logger()
	base, err := b.cfg.BotSettings(o.Bot)
	if err != nil { // validated at start: not expected
		log.Error().Err(err).Msg("bot settings not applied")
		return
	}
	s := base
	if o.Doc != nil {
		if s, err = botsettings.Check(base, o.Doc); err != nil {
			log.Error().Err(err).Msg("bot settings from etcd refused by this node; the bot keeps its previous settings (botctl bots show --bot " + o.Bot + ")")
			b.refuse(o, err)
			return
		}
	}
	cur := b.state(o.Bot)
	if cur.rev == o.Rev && o.Rev != 0 {
		return // applied already (read again after a lost watch)
	}
	st, err := b.build(s, cur, o.Rev)
	if err != nil {
		log.Error().Err(err).Msg("bot settings from etcd not applied: the backend cannot be built on this node; the bot keeps its previous settings")
		b.refuse(o, err)
		return
	}
	b.mu.Lock()
	b.bots[o.Bot] = st
	delete(b.refused, o.Bot)
	b.mu.Unlock()
	if o.Doc == nil {
		log.Info().Msg("bot settings override removed: the config file's apply")
	} else {
		log.Info().Str("ai", st.settings.AI.Kind).Bool("backend_rebuilt", st.backend != cur.backend).Msg("bot settings applied")
	}
}

func (b *Live) refuse(o botsettings.Override, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refused[o.Bot] = Refusal{Rev: o.Rev, Why: err.Error()}
}

// Refusal is bot's latest override that this node did not apply (rev 0:
// none; the latest seen applied).
func (b *Live) Refusal(bot string) Refusal {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.refused[bot]
}

// View is one bot's settings on this node, in GET /status.
type View struct {
	// Revision is the etcd override applied (0: the config file's).
	Revision int64 `json:"revision"`
	// Backend is the bot's ai.kind.
	Backend string `json:"backend"`
	// RefusedRevision and Refused: the latest override this node did not
	// apply, and why (the bot kept its settings).
	RefusedRevision int64  `json:"refused_revision,omitempty"`
	Refused         string `json:"refused,omitempty"`
}

// Views are the settings of every bot the file or etcd names.
func (b *Live) Views() map[string]View {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := map[string]View{}
	for bot, st := range b.bots {
		out[bot] = View{Revision: st.rev, Backend: st.settings.AI.Kind}
	}
	for bot, r := range b.refused {
		v := out[bot]
		if v.Backend == "" {
			v.Backend = b.top.settings.AI.Kind
		}
		v.RefusedRevision, v.Refused = r.Rev, r.Why
		out[bot] = v
	}
	return out
}

// state is bot's settings now.
func (b *Live) state(bot string) *botState {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if st := b.bots[bot]; st != nil {
		return st
	}
	return b.top
}

// Run is what bot's next task runs with (worker.Bots).
func (b *Live) Run(bot string) worker.BotRun {
	st := b.state(bot)
	m := st.settings.Memory
	return worker.BotRun{Backend: st.backend, MaxAnswerBytes: st.settings.AI.MaxAnswerBytes, Limits: limitsOf(st.settings.Limits),
		Memory: task.Memory{Turns: m.Turns, Bytes: m.Bytes, IdleExpiry: m.IdleExpiry}}
}

// Rules are bot's allowlists and texts (access.Bots).
func (b *Live) Rules(bot string) *access.Rules { return b.state(bot).rules }

// limitsOf are a bot's limits as pkg/limits counts them.
func limitsOf(l config.Limits) limits.Limits {
	set := func(s config.LimitSet) limits.Set {
		return limits.Set{MessagesPerMinute: s.MessagesPerMinute, MessagesPerDay: s.MessagesPerDay, TokensPerDay: s.TokensPerDay, BytesPerDay: s.BytesPerDay}
	}
	return limits.Limits{User: set(l.User), Bot: set(l.Bot)}
}

// Notes are bot's late note and busy reply (pusher.Notes).
func (b *Live) Notes(bot string) (late, busy string) {
	a := b.state(bot).settings.Access
	return a.LateNote, a.BusyText
}

// Tools is bot's ai.tools now, and whether this node serves bot
// (mcpgw.Allowlist).
func (b *Live) Tools(bot string) ([]string, bool) {
	b.mu.RLock()
	st := b.bots[bot]
	b.mu.RUnlock()
	if st == nil {
		return nil, false
	}
	return st.settings.AI.Tools, true
}

// ShowThinking is bot's ai.show_thinking (pusher.Thinking).
func (b *Live) ShowThinking(bot string) string { return b.state(bot).settings.AI.ShowThinking }

var (
	_ worker.Bots     = (*Live)(nil)
	_ access.Bots     = (*Live)(nil)
	_ pusher.Notes    = (*Live)(nil)
	_ pusher.Thinking = (*Live)(nil)
)

// Breakers are this node's AI circuit breakers (for the metrics).
func (b *Live) Breakers() *ai.Breakers { return b.breakers }

// Serve gives a bot served from now on (the bot registry's, added at run
// time: pkg/fleet) its settings: its record's sections over the config
// file's top level, built, then its override in etcd (botctl bots set)
// if it has one, before its loop starts. A bot it has already keeps what
// it runs with unless its record's sections changed. On an error nothing
// changes.
func (b *Live) Serve(bot config.Bot) error {
	rebuilt, err := b.serve(bot)
	if err != nil || !rebuilt || b.etcd == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	o, err := botsettings.Get(ctx, b.etcd, b.prefix, bot.ID)
	if err != nil {
		b.log.Warn().Err(err).Str("bot", bot.ID).Msg("bot settings override not read: the registry's settings apply until the watch reads it")
		return nil
	}
	if o.Doc != nil {
		b.apply(o)
	}
	return nil
}

// serve is Serve without the override: rebuilt says the bot's state was
// made anew of the file's and the record's settings.
func (b *Live) serve(bot config.Bot) (rebuilt bool, err error) {
	b.applying.Lock()
	defer b.applying.Unlock()
	cfg := b.cfg
	i := slices.IndexFunc(cfg.Bots, func(x config.Bot) bool { return x.ID == bot.ID })
	cfg.Bots = slices.Clone(cfg.Bots)
	if i >= 0 {
		cfg.Bots[i] = bot
	} else {
		cfg.Bots = append(cfg.Bots, bot)
	}
	if i >= 0 && reflect.DeepEqual(b.cfg.Bots[i].Settings, bot.Settings) {
		b.cfg = cfg // its secret, owner: nothing is built of them here
		return false, nil
	}
	s, err := cfg.BotSettings(bot.ID)
	if err != nil {
		return false, err
	}
	st, err := b.build(s, b.top, 0)
	if err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cfg = cfg
	b.bots[bot.ID] = st
	return true, nil
}

// Drop forgets a bot no longer served (its loop ended): from then on it
// has the top level's settings, as a bot neither the file nor etcd names.
func (b *Live) Drop(bot string) {
	b.applying.Lock()
	defer b.applying.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cfg.Bots = slices.DeleteFunc(slices.Clone(b.cfg.Bots), func(x config.Bot) bool { return x.ID == bot })
	delete(b.bots, bot)
	delete(b.refused, bot)
}
