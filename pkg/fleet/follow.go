package fleet

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/clusterkey"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The seams a Follower drives, each implemented by its owner and wired
// by pkg/serve.
type (
	// Node campaigns for the bots it is given (pkg/node.Node): Serve
	// starts a bot's loop (or gives a served bot the secret of its next
	// term), Drop ends it, as a graceful stop ends a term, and Refuse ends
	// it and shows the bot refused, with why, in the node's status. The
	// channels are closed once the loop has ended.
	//
	// Prove asks the node, if it holds the bot's connection (ok), to prove
	// a rotated secret by a subscribe after the connection's work has
	// drained; the outcome is nil (in use) or the error of the subscribe
	// (errors.Is wecom.ErrAuthFailed: WeCom refused it, and the connection
	// held is kept).
	Node interface {
		Serve(b config.Bot) error
		Drop(bot string) <-chan struct{}
		Refuse(bot, why string) <-chan struct{}
		Prove(bot, secret string) (outcome <-chan error, ok bool)
	}
	// Settings keeps a served bot's own settings on the node (its rules,
	// its backend): Serve before the bot's loop starts, Drop after it
	// ended.
	Settings interface {
		Serve(b config.Bot) error
		Drop(bot string)
	}
	// Deliveries is what the removal of a bot waits for on the node that
	// leads it: Leads says it does, Owed lists the bot's tasks whose
	// answer is not delivered yet.
	Deliveries interface {
		Leads(bot string) bool
		Owed(ctx context.Context, bot string) ([]string, error)
	}
)

// DefaultDrainWithin is Follower.DrainWithin's default.
const DefaultDrainWithin = 30 * time.Second

// drainLook is how often a removal's drain looks at what is still owed.
const drainLook = 200 * time.Millisecond

// Follower makes a running node follow the registry (Watch): it serves
// every bot added that ForNode gives it, gives a served bot the secret
// rotated in its record (from its next term on), and stops serving a bot
// removed, each as etcd reports it (in well under a second; a lost watch
// is read again in full). A bot it will not serve (no cluster key, another
// key, settings this node cannot apply) is refused: logged once per bot
// and reason, at error level, never with a secret, and shown in the
// node's status (Node.Refuse); the other bots are served.
//
// Removing a bot drains it: the node that leads it keeps leading while
// the bot's answers owed are delivered (Deliveries.Owed empty), at most
// DrainWithin, then its term ends as at a graceful stop (open streams
// closed with the handover note, the connection closed, every callback
// it read handled) and the answers still owed are logged by task id.
// Their records stay in JetStream, readable with botctl tasks. The other
// nodes stop campaigning at once.
//
// A bot of the config file is the file's: its record is neither served
// nor removed.
type Follower struct {
	Client *clientv3.Client
	Prefix string
	// Config is the node's, with the config file's bots only.
	Config config.Config
	// Key is the cluster key of secrets.key_file (nil: none).
	Key *clusterkey.Key
	// Served are the registered bots the node serves already (read at
	// its start).
	Served     []string
	Node       Node
	Settings   Settings   // nil: none kept
	Deliveries Deliveries // nil: a removal does not wait
	// DrainWithin bounds a removal's wait for its answers owed. Default
	// DefaultDrainWithin.
	DrainWithin time.Duration
	Logger      zerolog.Logger

	mu       sync.Mutex
	served   map[string]config.Bot // bot → as served
	refused  map[string]string     // bot → why (logged once)
	removing map[string]*config.Bot
	wg       sync.WaitGroup
}

// Run follows the registry until ctx ends, then waits for the removals
// under way.
func (f *Follower) Run(ctx context.Context) {
	f.mu.Lock()
	f.served, f.refused, f.removing = map[string]config.Bot{}, map[string]string{}, map[string]*config.Bot{}
	for _, bot := range f.Served {
		f.served[bot] = config.Bot{ID: bot}
	}
	f.mu.Unlock()
	if f.DrainWithin <= 0 {
		f.DrainWithin = DefaultDrainWithin
	}
	Watch(ctx, f.Client, f.Prefix, func(c Change) { f.apply(ctx, c) }, f.Logger)
	f.wg.Wait()
}

// apply makes the node follow one change.
func (f *Follower) apply(ctx context.Context, c Change) {
	bot := c.Bot.ID
	if slices.ContainsFunc(f.Config.Bots, func(b config.Bot) bool { return b.ID == bot }) {
		return // the file's entry wins
	}
	if c.Removed {
		f.remove(ctx, bot, "removed from the bot registry")
		return
	}
	out, refused := ForNode([]Bot{c.Bot}, f.Config.Bots, f.Config.Env, f.Key, f.Config.TopSettings())
	switch {
	case len(refused) > 0:
		f.refuse(bot, refused[0].Error())
	case len(out) == 0: // registered for another env
		f.remove(ctx, bot, "registered for env "+c.Bot.Env+", this node's is "+f.Config.Env)
	default:
		f.serve(out[0])
		if r := c.Bot.Rotation; r != nil && r.State == RotationPending {
			f.prove(ctx, c.Bot, out[0].Secret)
		}
	}
}

// prove has the rotated secret of rec proved where this node holds the
// bot's connection, and records the outcome in the registry: proved, or
// refused with WeCom's error and the secret before restored (every node
// then serves the bot with it again). Another outcome (the term ended
// first, WeCom not reached) leaves the rotation pending: the bot's next
// term connects with the new secret.
func (f *Follower) prove(ctx context.Context, rec Bot, secret string) {
	outcome, ok := f.Node.Prove(rec.ID, secret)
	if !ok {
		return // another node holds the connection, or none does
	}
	f.wg.Go(func() {
		log := f.Logger.With().Str("bot", rec.ID).Logger()
		var err error
		select {
		case err = <-outcome:
		case <-ctx.Done():
			return
		}
		if err != nil && !errors.Is(err, wecom.ErrAuthFailed) {
			log.Warn().Err(err).Msg("the bot's new secret was not proved; the rotation stays pending, and the bot's next term connects with it")
			return
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
		defer cancel()
		if serr := SettleRotation(wctx, f.Client, f.Prefix, rec, f.Config.NodeID, err, time.Now()); serr != nil {
			log.Error().Err(serr).AnErr("outcome", err).Msg("the outcome of the bot's secret rotation is not recorded")
			return
		}
		if err != nil {
			log.Error().Err(err).Msg("rotate-secret refused by WeCom: the bot keeps its connection and its old secret (restored in the registry); give the secret WeCom's console shows and rotate again")
			return
		}
		log.Info().Msg("rotate-secret proved: the bot's connection uses the new secret")
	})
}

// serve serves b, or gives it its record's new secret and settings.
func (f *Follower) serve(b config.Bot) {
	log := f.Logger.With().Str("bot", b.ID).Logger()
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.removing[b.ID]; r != nil {
		*r = b // served again once its removal has ended
		return
	}
	if cur, ok := f.served[b.ID]; ok && reflect.DeepEqual(cur, b) {
		return // read again after a lost watch
	}
	if f.Settings != nil {
		if err := f.Settings.Serve(b); err != nil {
			f.refuseLocked(b.ID, "registered bot "+b.ID+": settings not applied on this node: "+err.Error())
			return
		}
	}
	if err := f.Node.Serve(b); err != nil {
		f.refuseLocked(b.ID, err.Error())
		return
	}
	cur, was := f.served[b.ID]
	f.served[b.ID] = b
	delete(f.refused, b.ID)
	switch {
	case !was:
		log.Info().Msg("serving registered bot (added to the bot registry)")
	case cur.Secret != "" && cur.Secret != b.Secret:
		log.Info().Msg("registered bot's secret rotated: its next term connects with the new one")
	}
}

// refuse stops serving bot, if it did, and shows why.
func (f *Follower) refuse(bot, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuseLocked(bot, why)
}

func (f *Follower) refuseLocked(bot, why string) {
	if f.refused[bot] != why {
		f.Logger.Error().Str("bot", bot).Str("reason", why).Msg("registered bot not served")
	}
	f.refused[bot] = why
	delete(f.served, bot)
	f.Node.Refuse(bot, why)
	if r := f.removing[bot]; r != nil {
		*r = config.Bot{}
	}
}

// remove stops serving bot, draining it first where this node leads it;
// the removal runs on a goroutine of its own (Run waits for it).
func (f *Follower) remove(ctx context.Context, bot, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.refused[bot]; ok {
		delete(f.refused, bot)
		f.Node.Drop(bot) // forgets the refusal
	}
	if r := f.removing[bot]; r != nil {
		*r = config.Bot{} // not served again once removed
		return
	}
	if _, ok := f.served[bot]; !ok {
		return
	}
	delete(f.served, bot)
	again := &config.Bot{}
	f.removing[bot] = again
	f.wg.Go(func() {
		f.drain(ctx, bot, why)
		f.mu.Lock()
		delete(f.removing, bot)
		f.mu.Unlock()
		if again.ID != "" && ctx.Err() == nil {
			f.serve(*again)
		}
	})
}

// drain is one bot's removal: the answers owed delivered (at most
// DrainWithin) while this node leads it, its loop ended, what is still
// owed listed.
func (f *Follower) drain(ctx context.Context, bot, why string) {
	log := f.Logger.With().Str("bot", bot).Str("reason", why).Logger()
	led := f.Deliveries != nil && f.Deliveries.Leads(bot)
	if led {
		log.Info().Dur("within", f.DrainWithin).Msg("removing bot: delivering its answers owed before closing its connection")
		dctx, cancel := context.WithTimeout(ctx, f.DrainWithin)
		for dctx.Err() == nil && f.Deliveries.Leads(bot) {
			owed, err := f.Deliveries.Owed(dctx, bot)
			if err == nil && len(owed) == 0 {
				break
			}
			pause.For(dctx, drainLook)
		}
		cancel()
	}
	<-f.Node.Drop(bot)
	if f.Settings != nil {
		f.Settings.Drop(bot)
	}
	if !led {
		log.Info().Msg("bot no longer served by this node")
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
	defer cancel()
	owed, err := f.Deliveries.Owed(rctx, bot)
	switch {
	case err != nil:
		log.Warn().Err(err).Msg("bot removed: connection closed; its answers still owed could not be listed (botctl tasks --bot " + bot + ")")
	case len(owed) > 0:
		log.Warn().Strs("tasks", owed).Msg("bot removed: connection closed with answers still owed, not delivered (their records: botctl tasks --bot " + bot + ")")
	default:
		log.Info().Msg("bot removed: every answer owed delivered, connection closed")
	}
}

// NewFollower is the Follower of a node whose config file is file (its
// bots the file's only) and that serves running (the file's and the
// registry's read at its start, WithRegistry), with the cluster key of
// file's secrets.key_file (a key that does not load: none, and every
// registered bot is refused naming the key file).
func NewFollower(cli *clientv3.Client, prefix string, file config.Config, running []config.Bot, node Node, settings Settings, d Deliveries, log zerolog.Logger) *Follower {
	f := &Follower{Client: cli, Prefix: prefix, Config: file, Node: node, Settings: settings, Deliveries: d,
		Logger: log.With().Str("component", "bot_registry").Logger()}
	for _, b := range running {
		if !slices.ContainsFunc(file.Bots, func(x config.Bot) bool { return x.ID == b.ID }) {
			f.Served = append(f.Served, b.ID)
		}
	}
	if file.Secrets.KeyFile != "" {
		k, err := clusterkey.Load(file.Secrets.KeyFile)
		if err != nil {
			f.Logger.Error().Err(err).Msg("cluster key not loaded: the registry's bots are not served")
			k = nil
		}
		f.Key = k
	}
	return f
}
