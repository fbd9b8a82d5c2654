// Package serve wires one botctl node together: the node's life (election,
// connection), the inbound path, dispatch, the worker, the pusher, the
// spool and the node's HTTP API, on an etcd client and a NATS connection
// that the caller provides (embedded or external: nothing here cares).
package serve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/bots"
	"github.com/botctl/botctl/pkg/botsettings"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/dispatch"
	"github.com/botctl/botctl/pkg/fleet"
	"github.com/botctl/botctl/pkg/heal/alert"
	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/botctl/botctl/pkg/mcpgw"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/redact"
	"github.com/botctl/botctl/pkg/skew"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/worker"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// natsMaxPingsOut is how many pings may go unanswered before the NATS
// connection is taken as dead (nats.go's default).
const natsMaxPingsOut = 2

// Options are what Run needs besides the validated configuration.
type Options struct {
	Config  config.Config // validated, secrets resolved
	Etcd    *clientv3.Client
	NATSURL string
	// NATSOptions are the connection's TLS and credentials
	// (config.NATS.Options).
	NATSOptions []nats.Option
	Listener    net.Listener // the node API's
	Version     string
	// TaskAckWait, if set, overrides the task queue's ack wait (tests).
	TaskAckWait time.Duration
	Logger      zerolog.Logger
	// Ready, if set, is called once every component is running.
	Ready func(*Node)

	// SweepInterval, if set, overrides task.SweepInterval (tests).
	SweepInterval time.Duration
}

// Node is a running node, for status and tests. Store, Lifecycle, Worker
// and Dispatch are set once JetStream is bound (when Options.Ready runs).
type Node struct {
	Node     *node.Node
	Store    *jetstream.Store
	Access   *access.Access
	Dispatch *dispatch.Dispatcher
	Worker   *worker.Worker
	// Lifecycle is the one writer of task records on this node.
	Lifecycle *task.Lifecycle
	// Spool holds tasks received while JetStream could not take them.
	Spool *jetstream.Spool
	// Health detects, records and recovers this node's bots' incidents.
	Health *health.Health
	// Alerter sends the cluster's alerts while this node is elected to
	// (nil: no sink configured).
	Alerter *alert.Alerter

	leaders *leaders   // the bots this node leads: budgets and pushers
	bots    *bots.Live // every bot's settings now: file, registry and etcd (pkg/bots)
	cfg     config.Config
	log     zerolog.Logger
	// base is the caller's logger, without the node field: for the
	// components that add it themselves (node, worker, alerter), so that
	// a line carries it once.
	base     zerolog.Logger
	ready    chan struct{} // closed once JetStream is bound (Store, Lifecycle, Worker, Dispatch set)
	etcd     *clientv3.Client
	tracker  atomic.Pointer[backfill.Tracker]
	backfill *backfill.Backfiller
	mcp      *mcpgw.Gateway // WeCom's MCP tools for every agent (pkg/mcpgw)
	token    string         // api.token_file's: POST /v1/exec asks for it, tier 2 sends it
	apiCli   *http.Client   // tier 2's client: api.ca_file trusted
	obs      *observer      // metrics, liveness, readiness, sd_notify (metrics.go)
	skew     *skew.Watch    // this node's clock against JetStream's (skew.go)

	sweep time.Duration // Options.SweepInterval
}

// Budget is bot's per-conversation send budget, shared by the inbound path
// and every term's pusher.
func (n *Node) Budget(bot string) *pace.Budget { return n.leaders.Budget(bot) }

// Pusher is bot's pusher while this node leads it, else nil.
func (n *Node) Pusher(bot string) *pusher.Pusher { return n.leaders.Pusher(bot) }

// running is the config the node runs with, and its logger: worker.slots
// 0 derived from this machine, and the bots of the file, then those of
// the bot registry in etcd that this node serves (the file's entry wins;
// fleet.WithRegistry).
func (o Options) running(ctx context.Context) (config.Config, zerolog.Logger) {
	cfg := o.Config.Derived()
	log := o.Logger.With().Str("node", cfg.NodeID).Logger()
	cfg.Bots = fleet.WithRegistry(ctx, o.Etcd, botsettings.DefaultPrefix, cfg, log)
	return cfg, log
}

// Run runs the node until ctx ends; it returns after every term is
// resigned, every connection closed and every goroutine ended.
//
// NATS need not be reachable at start: the node campaigns, holds its bots'
// connections and receives at once; until JetStream answers, what it
// receives is receipted and kept in the local spool (a conversation with a
// spooled task is busy), and once JetStream answers the rest starts
// (streams and buckets declared, the spool forwarded, the worker, the
// pusher of every bot it leads). Ready is called then.
//
// Shutdown order: the node's terms end (each: pusher drained, connection
// closed, its callbacks handled, resign), then the worker, the forwarder
// and the advisory watch stop, then the API, the spool and NATS close.
func Run(ctx context.Context, o Options) error {
	cfg, log := o.running(ctx)
	if err := checkListener(o.Listener, cfg.API.TokenFile); err != nil {
		return err
	}
	token, agents, err := nodeTokens(cfg, log)
	if err != nil {
		return err
	}
	apiLn, apiURL, err := apiListener(o.Listener, cfg.API)
	if err != nil {
		return err
	}
	apiCli, err := apiClient(cfg.API)
	if err != nil {
		return err
	}

	// Fail fast while JetStream is away (ReconnectBufSize -1): a publish
	// then errors at once and the dispatcher falls back, instead of
	// waiting in a buffer that may deliver later. RetryOnFailedConnect: a
	// node starts while NATS is down, and connects when it is back.
	// PingInterval and MaxPingsOut: a frozen server is left for another
	// within seconds (config.NATS.PingInterval).
	nc, err := nats.Connect(o.NATSURL, append(slices.Clip(o.NATSOptions), nats.Name("botctl "+cfg.NodeID), nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond), nats.ReconnectBufSize(-1), nats.RetryOnFailedConnect(true),
		nats.PingInterval(cfg.NATS.PingInterval), nats.MaxPingsOutstanding(natsMaxPingsOut))...)
	if err != nil {
		return fmt.Errorf("connect NATS %s: %w", redact.URL(o.NATSURL), redact.Error(err))
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	live, err := bots.New(ctx, cfg, o.Etcd, log) // every bot's settings and rules
	if err != nil {
		return err
	}
	spool, err := jetstream.OpenSpool(filepath.Join(cfg.DataDir, "spool.db"), jetstream.SpoolMaxEntries(cfg.Spool.MaxEntries), jetstream.SpoolMaxBytes(cfg.Spool.MaxBytes))
	if err != nil {
		return fmt.Errorf("open spool: %w", err)
	}
	defer spool.Close()

	n := &Node{Spool: spool, leaders: newLeaders(cfg.Push.Budget, cfg.Push.BudgetHourly), cfg: cfg, bots: live,
		ready: make(chan struct{}), log: log, base: o.Logger, token: token, apiCli: apiCli, etcd: o.Etcd,
		skew: &skew.Watch{Max: cfg.NATS.MaxClockSkew}, sweep: o.SweepInterval}
	n.obs = newObserver(n, nc, o.Etcd)
	n.backfill, n.mcp = newBackfiller(cfg, log), n.mcpGateway(token, agents)
	var wg sync.WaitGroup
	defer wg.Wait()
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()

	// The health monitor outlives the node: the node's graceful stop ends
	// its terms, and the record of each handover must be written before
	// the next leader reads it (or it finds a leader vanished without a
	// word). Stopped once the node is done, on every return path.
	healthCtx, stopHealth := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHealth()
	n.Health = health.New(n.healthConfig())
	wg.Go(func() { n.Health.Run(healthCtx) })

	n.Access, err = access.New(access.Config{
		NodeID: cfg.NodeID, Dispatch: handOff{n}, Cards: live,
		AllowUsers: cfg.Access.AllowUsers, AllowChats: cfg.Access.AllowChats,
		MaxQuestionBytes: cfg.Access.MaxQuestionBytes,
		Texts:            access.Texts{Receipt: cfg.Access.ReceiptText, Welcome: cfg.Access.WelcomeText, WelcomeCard: cfg.Access.WelcomeCard, Version: cfg.Access.ReportedVersion},
		Bots:             live,
		Outbound:         n.leaders,
		Watermark:        watermark{n},
		Marks:            n.Health,
		Metrics:          n.obs.metrics,
		Media:            mediaFetcher(cfg),
		Logger:           log,
	})
	if err != nil {
		return err
	}
	jsHealth := n.jetStreamHealth(nc, o.Etcd, log)
	n.Node, err = node.New(o.Etcd, node.Config{
		NodeID: cfg.NodeID, Env: cfg.Env, Version: o.Version, Address: apiURL,
		Slots: cfg.Worker.Slots, Bots: cfg.Bots, DataDir: cfg.DataDir,
		WeCom: wecom.Config{URL: cfg.WeCom.URL, HeartbeatInterval: cfg.WeCom.HeartbeatInterval, AckTimeout: cfg.WeCom.AckTimeout,
			MaxAckTimeouts: cfg.WeCom.MaxAckTimeouts, CallbackQueue: cfg.WeCom.CallbackQueue, Frames: n.obs.metrics},
		Election: election.Config{TTL: cfg.Election.TTL, SafetyMargin: cfg.Election.SafetyMargin,
			PulseInterval: cfg.Election.PulseInterval, PulseTimeout: cfg.Election.PulseTimeout, NoPulse: cfg.Election.PulseTimeout == 0},
		KickLimit: cfg.Election.KickLimit, KickWindow: cfg.Election.KickWindow, Balance: balanceConfig(cfg.Election.Balance),
		Inbound: n.Access, Hooks: termHooks{n}, Health: n.Health, Metrics: n.obs.metrics,
		Skew: jetstream.Offs{n.skew, jsHealth}, DataPlane: jsHealth,
		Logger: n.base, // node.New adds the node field
	})
	if err != nil {
		return err
	}

	srv := n.apiServer(workCtx, &wg, o.Etcd)
	wg.Go(func() { srv.Serve(apiLn) })
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), apiShutdownTimeout)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	// The election loop has a context of its own: it ends with ctx, or
	// at once when the node fails to start, so that a node that will not
	// serve neither keeps campaigning for its bots nor holds its data dir.
	nodeCtx, stopNode := context.WithCancel(ctx)
	defer stopNode()
	nodeDone := make(chan error, 1)
	// nats.go closes a connection for good when the server refuses it
	// twice in a row with the same authorization error (credentials
	// revoked or rotated under a running node). A node left without NATS
	// would hold the bot and spool forever: it stops instead, saying which
	// key to fix, and leaves the bot to a node whose credentials work.
	natsClosed := make(chan error, 1)
	nc.SetClosedHandler(func(c *nats.Conn) {
		if ctx.Err() != nil {
			return // our own shutdown
		}
		err := cfg.NATS.RefusedError(c.LastError())
		if err == nil {
			err = fmt.Errorf("NATS connection closed for good: %w", redact.Error(c.LastError()))
		}
		select {
		case natsClosed <- err:
		default:
		}
		stopNode()
	})
	n.follow(workCtx, &wg, o)                      // bots and their settings changed at run time (fleet.go)
	go func() { nodeDone <- n.runNode(nodeCtx) }() // resigns every term after closing its connection
	wg.Go(func() { n.obs.notify(workCtx) })        // READY=1 and watchdog pings to systemd, if it runs us

	unlock := declareLock(ctx, o.Etcd, cfg.NATS.Prefix, log)
	store, err := declare(ctx, nc, cfg.NATS, js, cfg.DataPlane(), o.TaskAckWait, log)
	unlock()
	if err == nil {
		err = n.start(workCtx, &wg, store)
	}
	if err != nil {
		if ctx.Err() == nil {
			log.Error().Err(err).Msg("node not started; stopping")
		}
		stopNode()
		<-nodeDone
		stopHealth()
		stopWork()
		n.Access.Wait()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if o.Ready != nil {
		o.Ready(n)
	}
	err = <-nodeDone
	stopHealth()
	n.Access.Wait()
	stopWork()
	select {
	case cerr := <-natsClosed:
		log.Error().Err(cerr).Msg("NATS connection closed for good; node stopped")
		if err == nil {
			err = cerr
		}
	default:
	}
	return err
}

// start binds JetStream and starts what needs it: the lifecycle, the
// forwarder of the spool, the worker, the dispatcher and the advisory
// watch; then the inbound path and every term's pusher use them.
func (n *Node) start(ctx context.Context, wg *sync.WaitGroup, store *jetstream.Store) error {
	cfg, log := n.cfg, n.log
	// Every bot's backend (pkg/bots), built beside the context bucket where
	// an agent platform's conversation ids are kept.
	if err := n.bots.Bind(n.Health, ai.WithSessions(task.NewSessions(store.Context(), log)), ai.WithTools(n.mcp.Backend(mcpAgentBackend))); err != nil {
		return err
	}
	lc := task.NewLifecycle(store, cfg.NodeID, log).WithSweepInterval(n.sweep).WithCorruption(n.obs)
	out := dispatch.NewSpoolOut(store, lc, log, n.leaders)
	fwd, err := jetstream.NewForwarder(jetstream.ForwarderConfig{Spool: n.Spool, Publish: out, Logger: log,
		Expiry: cfg.Spool.Expiry, Expired: out.Expired(cfg.Spool.Expiry), LateAfter: cfg.Spool.LateAfter})
	if err != nil {
		return err
	}
	w, err := worker.New(worker.Config{
		NodeID: cfg.NodeID, Slots: cfg.Worker.Slots, LeaderSlots: cfg.Worker.LeaderSlots, AIConcurrency: cfg.AI.MaxConcurrency,
		Leadership: n.leaders,
		Bots:       n.bots, Store: store, Lifecycle: lc, Deadline: cfg.Worker.Deadline,
		OutputInterval: outputInterval(cfg),
		Metrics:        n.obs, Skew: n.skew, Logger: n.base, // worker.New adds node and component
	})
	if err != nil {
		return err
	}
	d, err := dispatch.New(dispatch.Config{
		Queue:       store,
		Spool:       taskSpool{n, fwd},
		FixedWorker: cfg.Dispatch.FixedWorker, Token: n.token, Client: n.apiCli,
		Local:   localTier{ctx: ctx, w: w, wg: wg},
		Metrics: n.obs,
		Logger:  log,
	})
	if err != nil {
		return err
	}
	n.Store, n.Lifecycle, n.Worker, n.Dispatch = store, lc, w, d
	tracker := &backfill.Tracker{Store: store, Node: cfg.NodeID, Spool: n.Spool, Logger: log}
	n.tracker.Store(tracker)
	wg.Go(func() { tracker.Run(ctx, 2*time.Second) })
	n.Access.Bind(store, lc)
	n.Health.Bind(store, lc)
	n.backfill.Bind(store, n.Access, tracker)
	close(n.ready) // publishes the fields above to the terms and the API
	wg.Go(func() { n.watchSkew(ctx, store) })
	wg.Go(func() { fwd.Run(ctx) })
	fwd.Kick() // what was spooled before JetStream answered
	wg.Go(func() {
		if err := w.Run(ctx); err != nil {
			log.Error().Err(err).Msg("worker stopped: this node computes nothing")
		}
	})
	wg.Go(func() {
		if err := lc.WatchMaxDeliveries(ctx); err != nil {
			log.Error().Err(err).Msg("tasks past their last delivery are found by the sweep only")
		}
	})
	a, err := n.newAlerter(store)
	if err != nil {
		return err
	}
	if a != nil {
		n.Alerter = a
		wg.Go(func() {
			if err := alert.RunElected(ctx, n.etcd, alert.DefaultPrefix, cfg.NodeID, a); err != nil && ctx.Err() == nil {
				log.Error().Err(err).Msg("alerter stopped: incidents are recorded but nobody is paged from this node")
			}
		})
	}
	log.Info().Msg("JetStream bound: worker, pusher and spool forwarding running")
	return nil
}

// started reports whether JetStream is bound (start has run).
func (n *Node) started() bool {
	select {
	case <-n.ready:
		return true
	default:
		return false
	}
}
