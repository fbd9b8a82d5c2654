// Package serve wires one botctl node together: the node's life (election,
// connection), the inbound path, dispatch, the worker, the pusher, the
// spool and the node's HTTP API, on an etcd client and a NATS connection
// that the caller provides (embedded or external: nothing here cares).
package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/alert"
	"github.com/botctl/botctl/pkg/backfill"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/demoui"
	"github.com/botctl/botctl/pkg/dispatch"
	"github.com/botctl/botctl/pkg/health"
	"github.com/botctl/botctl/pkg/incident"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/recovery"
	"github.com/botctl/botctl/pkg/redact"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/worker"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

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

	mu       sync.Mutex
	pushers  map[string]*pusher.Pusher // bot → the current term's pusher
	budgets  map[string]*pace.Budget   // bot → its conversations' budget
	leadingN int                       // terms with a pusher running
	cfg      config.Config
	log      zerolog.Logger
	// base is the caller's logger, without the node field: for the
	// components that add it themselves (node, worker, alerter), so that
	// a line carries it once.
	base    zerolog.Logger
	ready   chan struct{} // closed once JetStream is bound (Store, Lifecycle, Worker, Dispatch set)
	etcd    *clientv3.Client
	tracker atomic.Pointer[backfill.Tracker]
	history backfill.HistorySource // nil: no gap backfill
	token   string                 // api.token_file's: POST /v1/exec asks for it, tier 2 sends it
	apiCli  *http.Client           // tier 2's client: api.ca_file trusted
	obs     *observer              // metrics, liveness, readiness, sd_notify (metrics.go)
}

// Budget is bot's per-conversation send budget, shared by the inbound path
// and every term's pusher.
func (n *Node) Budget(bot string) *pace.Budget {
	n.mu.Lock()
	defer n.mu.Unlock()
	b := n.budgets[bot]
	if b == nil {
		b = pace.New(n.cfg.Push.Budget, time.Minute, nil)
		n.budgets[bot] = b
	}
	return b
}

// Pusher is bot's pusher while this node leads it, else nil.
func (n *Node) Pusher(bot string) *pusher.Pusher {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pushers[bot]
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
	cfg := o.Config
	log := o.Logger.With().Str("node", cfg.NodeID).Logger()
	token, err := cfg.API.Token()
	if err != nil {
		return err
	}
	if err := checkListener(o.Listener, token); err != nil {
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
	nc, err := nats.Connect(o.NATSURL, append(slices.Clip(o.NATSOptions), nats.Name("botctl "+cfg.NodeID), nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond), nats.ReconnectBufSize(-1), nats.RetryOnFailedConnect(true))...)
	if err != nil {
		return fmt.Errorf("connect NATS %s: %w", redact.URL(o.NATSURL), redact.Error(err))
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	backend, err := ai.New(cfg.AI)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	spool, err := jetstream.OpenSpool(filepath.Join(cfg.DataDir, "spool.db"))
	if err != nil {
		return fmt.Errorf("open spool: %w", err)
	}
	defer spool.Close()

	n := &Node{Spool: spool, pushers: map[string]*pusher.Pusher{}, budgets: map[string]*pace.Budget{}, cfg: cfg,
		ready: make(chan struct{}), log: log, base: o.Logger, token: token, apiCli: apiCli, etcd: o.Etcd}
	if cfg.Backfill.HistoryURL != "" {
		n.history = &backfill.SimHistory{Base: cfg.Backfill.HistoryURL}
	}
	n.obs = newObserver(n, nc, o.Etcd)
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
		NodeID: cfg.NodeID, Dispatch: n.dispatch,
		AllowUsers: cfg.Access.AllowUsers, AllowChats: cfg.Access.AllowChats,
		MaxQuestionBytes: cfg.Access.MaxQuestionBytes,
		Texts:            access.Texts{Receipt: cfg.Access.ReceiptText, Welcome: cfg.Access.WelcomeText},
		Budget:           n.Budget,
		Handled: func(bot string, created time.Time) {
			if t := n.tracker.Load(); t != nil {
				t.Handled(bot, created)
			}
		},
		Dispatched: func(bot, taskID, chat string) {
			if p := n.Pusher(bot); p != nil {
				p.NotifyChat(taskID, chat)
			}
		},
		Idle: func(bot, chat string) bool {
			p := n.Pusher(bot)
			return p != nil && p.Idle(chat)
		},
		Incomplete: n.Health.TakeIncomplete,
		Marked:     n.Health.Marked,
		Receipted:  n.obs.metrics.Receipted,
		Stage:      n.obs.metrics.Stage,
		Logger:     log,
	})
	if err != nil {
		return err
	}
	n.Node, err = node.New(o.Etcd, node.Config{
		NodeID: cfg.NodeID, Env: cfg.Env, Version: o.Version, Address: apiURL,
		Slots: cfg.Worker.Slots, Bots: cfg.Bots, DataDir: cfg.DataDir,
		WeCom: wecom.Config{URL: cfg.WeCom.URL, HeartbeatInterval: cfg.WeCom.HeartbeatInterval, AckTimeout: cfg.WeCom.AckTimeout,
			MaxAckTimeouts: cfg.WeCom.MaxAckTimeouts, CallbackQueue: cfg.WeCom.CallbackQueue, Frames: n.obs.metrics},
		Election: election.Config{TTL: cfg.Election.TTL, SafetyMargin: cfg.Election.SafetyMargin,
			PulseInterval: cfg.Election.PulseInterval, PulseTimeout: cfg.Election.PulseTimeout, NoPulse: cfg.Election.PulseTimeout == 0},
		KickLimit: cfg.Election.KickLimit, KickWindow: cfg.Election.KickWindow,
		Inbound: n.Access,
		Hooks:   termHooks{n},
		Health:  n.Health,
		Metrics: n.obs.metrics,
		Logger:  n.base, // node.New adds the node field
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
	// at once when the node fails to start (waiting for it to end with
	// the process kept a node that "stopped" campaigning for its bots,
	// and holding its data dir, until it was killed).
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
	go func() { nodeDone <- n.Node.Run(nodeCtx) }() // resigns every term after closing its connection
	wg.Go(func() { n.obs.notify(workCtx) })         // READY=1 and watchdog pings to systemd, if it runs us

	unlock := declareLock(ctx, o.Etcd, cfg.NATS.Prefix, log)
	store, err := declare(ctx, nc, cfg.NATS, js, jetstream.Options{Prefix: cfg.NATS.Prefix, Replicas: cfg.NATS.Replicas, TaskAckWait: o.TaskAckWait, Logger: log}, log)
	unlock()
	if err == nil {
		err = n.start(workCtx, &wg, store, backend)
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

// declareLock takes a cluster-wide lock (an etcd mutex under /botctl/)
// for the declaration of the JetStream names of prefix, so that nodes
// starting together declare one after another: on a fresh NATS cluster at
// replicas 3, three nodes creating the same streams and buckets at once
// (and turning their direct gets off) took 1.5–2.3 minutes to be ready,
// their calls timing out against each other (test/load -topology r3), one
// after another about a second each. The lock is a courtesy, not a
// guarantee (Declare is idempotent): when etcd does not answer, or the
// holder takes longer than declareLockWait, the node declares anyway.
func declareLock(ctx context.Context, cli *clientv3.Client, prefix string, log zerolog.Logger) (unlock func()) {
	none := func() {}
	if cli == nil {
		return none
	}
	gctx, cancel := context.WithTimeout(ctx, declareLockWait)
	defer cancel()
	lease, err := cli.Grant(gctx, declareLockTTL)
	if err != nil {
		log.Debug().Err(err).Msg("declare lock not taken (etcd); declaring without it")
		return none
	}
	sctx, stop := context.WithCancel(ctx)
	sess, err := concurrency.NewSession(cli, concurrency.WithLease(lease.ID), concurrency.WithContext(sctx))
	if err != nil {
		stop()
		log.Debug().Err(err).Msg("declare lock not taken (etcd); declaring without it")
		return none
	}
	m := concurrency.NewMutex(sess, "/botctl/declare/"+prefix)
	if err := m.Lock(gctx); err != nil {
		sess.Close()
		stop()
		log.Info().Err(err).Dur("waited", declareLockWait).Msg("declare lock not taken; declaring without it")
		return none
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		m.Unlock(uctx)
		cancel()
		sess.Close() // revokes the lease
		stop()
	}
}

// declareLockWait bounds the wait for the declare lock; declareLockTTL
// (seconds) is its lease: a node that dies holding it frees it that soon.
const (
	declareLockWait = 45 * time.Second
	declareLockTTL  = 10
)

// jsErrNoPeers is nats-server's JSClusterNoPeersErrF (10005, "no suitable
// peers for placement"), which nats.go does not name.
const jsErrNoPeers natsjs.ErrorCode = 10005

// declare declares JetStream's streams and buckets, retrying (with
// progress in the log) until it succeeds or ctx ends: the node serves in
// the meantime, spooling what it receives. It gives up if nc is closed:
// nats.go closes a connection that a server refused twice with the same
// authorization error, and no wait fixes the credentials.
func declare(ctx context.Context, nc *nats.Conn, natsCfg config.NATS, js natsjs.JetStream, opts jetstream.Options, log zerolog.Logger) (*jetstream.Store, error) {
	for wait := time.Second; ; wait = min(2*wait, 15*time.Second) {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		store, err := jetstream.Declare(dctx, js, opts)
		cancel()
		if err == nil {
			return store, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if nc.IsClosed() {
			if refused := natsCfg.RefusedError(nc.LastError()); refused != nil {
				return nil, redact.Error(refused)
			}
			return nil, fmt.Errorf("NATS connection closed: %w", redact.Error(nc.LastError()))
		}
		var apiErr *natsjs.APIError
		switch {
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrNoPeers:
			// Fewer servers up than the replicas asked for: a cluster
			// still forming (every node of a fresh deploy starting at
			// once), a server down, or a cluster smaller than
			// nats.replicas. Only the last is a configuration problem,
			// and the warning names it.
			log.Warn().Err(err).Int("replicas", opts.Replicas).Dur("retry_in", wait).
				Msg("JetStream has too few servers up to place the store's replicas: waiting, receiving into the local spool (if the cluster has fewer servers than nats.replicas, lower nats.replicas)")
		case errors.As(err, &apiErr) && apiErr.ErrorCode != natsjs.JSErrCodeJetStreamNotEnabled && apiErr.Code != 503:
			// JetStream answered and refused: a configuration problem
			// (a name taken by a stream botctl cannot change), not an
			// outage. Waiting will not fix it.
			return nil, fmt.Errorf("declare JetStream streams and buckets: %w", err)
		default:
			log.Warn().Err(err).Dur("retry_in", wait).Msg("JetStream unreachable: receiving into the local spool until it answers")
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// start binds JetStream and starts what needs it: the lifecycle, the
// forwarder of the spool, the worker, the dispatcher and the advisory
// watch; then the inbound path and every term's pusher use them.
func (n *Node) start(ctx context.Context, wg *sync.WaitGroup, store *jetstream.Store, backend ai.Backend) error {
	cfg, log := n.cfg, n.log
	lc := task.NewLifecycle(store, cfg.NodeID, log)
	out := newSpoolOut(store, lc, log, func(bot, taskID string) {
		if p := n.Pusher(bot); p != nil {
			p.Notify(taskID)
		}
	})
	fwd, err := jetstream.NewForwarder(jetstream.ForwarderConfig{Spool: n.Spool, Publish: out.publish, Logger: log})
	if err != nil {
		return err
	}
	w, err := worker.New(worker.Config{
		NodeID: cfg.NodeID, Slots: cfg.Worker.Slots, LeaderSlots: cfg.Worker.LeaderSlots, AIConcurrency: cfg.AI.MaxConcurrency,
		Leading: n.isLeading,
		Backend: backend, Store: store, Lifecycle: lc, Deadline: cfg.Worker.Deadline,
		OutputInterval: outputInterval(cfg),
		NATSError:      n.obs.requestError, Logger: n.base, // worker.New adds node and component
	})
	if err != nil {
		return err
	}
	d, err := dispatch.New(dispatch.Config{
		Publish: store.PublishTask,
		Spool: func(m task.Message, payload []byte) error {
			err := n.spoolTask(m, payload)
			fwd.Kick()
			return err
		},
		Spooled:     n.Spool.Holds,
		FixedWorker: cfg.Dispatch.FixedWorker, Token: n.token, Client: n.apiCli,
		// Bounded by the worker's slots: a full node refuses, and the
		// dispatcher keeps the task in the spool for the queue.
		Local:     func(m task.Message) error { return w.Go(ctx, m, string(dispatch.TierLocal), wg) },
		NATSError: n.obs.requestError,
		Logger:    log,
	})
	if err != nil {
		return err
	}
	n.Store, n.Lifecycle, n.Worker, n.Dispatch = store, lc, w, d
	tracker := &backfill.Tracker{Store: store, Node: cfg.NodeID, Logger: log,
		Holding: func() bool { depth, err := n.Spool.Len(); return err != nil || depth > 0 }}
	n.tracker.Store(tracker)
	wg.Go(func() { tracker.Run(ctx, 2*time.Second) })
	n.Access.Bind(store, lc)
	n.Health.Bind(store, lc)
	close(n.ready) // publishes the fields above to the terms and the API
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

// newAlerter builds the alerter of the configured sinks (nil, nil: none).
// One node of the cluster runs it at a time (alert.RunElected).
func (n *Node) newAlerter(store *jetstream.Store) (*alert.Alerter, error) {
	cfg := n.cfg
	robot, webhook, err := cfg.Alert.AlertSinks()
	if err != nil {
		return nil, fmt.Errorf("alert sinks: %w", err)
	}
	var sinks []alert.Sink
	if robot != "" {
		sinks = append(sinks, countSends(alert.NewWeComRobot(robot)))
	}
	if webhook != "" {
		sinks = append(sinks, countSends(alert.NewWebhook(webhook)))
	}
	if len(sinks) == 0 {
		n.log.Warn().Msg("no alert sink (alert.wecom_robot_url_file, alert.webhook_url): incidents are recorded (botctl incidents) but nobody is paged")
		return nil, nil
	}
	owners := map[string]string{}
	for _, b := range cfg.Bots {
		if b.Owner != "" {
			owners[b.ID] = b.Owner
		}
	}
	syn := cfg.Alert.Synthetic
	if syn == 0 {
		syn = alert.SyntheticOff
	}
	return alert.New(incident.NewStore(store.Incidents()), alert.Config{
		NodeID: cfg.NodeID, Sinks: sinks, Owners: owners, Synthetic: syn,
		Window: cfg.Alert.Window, EscalateAfter: cfg.Alert.EscalateAfter, FlapWindow: cfg.Alert.FlapWindow,
		EtcdError: n.obs.metrics.EtcdError,
		Logger:    n.base, // alert.New adds node and component
	})
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

// dispatch is the inbound path's hand-off: the dispatcher once JetStream
// is bound; before that, the spool (busy if the conversation already has
// a spooled task, as the dispatcher itself would answer).
func (n *Node) dispatch(ctx context.Context, m task.Message, dup func() bool) (dispatch.Outcome, error) {
	if n.started() {
		return n.Dispatch.DispatchUnless(ctx, m, dup)
	}
	if n.Spool.Holds(m.Bot, m.Chat) {
		return dispatch.Outcome{Busy: true}, nil
	}
	payload, err := json.Marshal(m)
	if err != nil {
		return dispatch.Outcome{}, err
	}
	if err := n.spoolTask(m, payload); err != nil {
		return dispatch.Outcome{}, fmt.Errorf("JetStream not reachable and the spool refused the task: %w", err)
	}
	n.log.Info().Str("bot", m.Bot).Str("task", m.TaskID).Msg("JetStream not reachable yet: task spooled")
	return dispatch.Outcome{Spooled: true}, nil
}

func (n *Node) spoolTask(m task.Message, payload []byte) error {
	return n.Spool.Append(jetstream.SpoolEntry{Bot: m.Bot, Conversation: m.Chat, MsgID: m.MsgID, Payload: payload, Received: m.Received})
}

func (n *Node) isLeading() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leadingN > 0
}

// leading is a term's work on its connection, once JetStream is bound:
// the bot's pusher and the lifecycle's sweep, until ctx (the term) ends.
func (n *Node) leading(ctx context.Context, term *election.Term, conn *wecom.Conn) {
	var p *pusher.Pusher
	defer func(ended func(*pusher.Pusher)) { ended(p) }(n.obs.term(term.Bot, conn))
	select {
	case <-n.ready:
	case <-ctx.Done():
		return
	}
	cfg, log := n.cfg, n.log
	var err error
	p, err = pusher.New(pusher.Config{
		Bot: term.Bot, NodeID: cfg.NodeID, Term: term.Rev, Conn: conn, Store: n.Store, Lifecycle: n.Lifecycle,
		Budget: n.Budget(term.Bot), StreamWindow: cfg.Push.StreamWindow, Heartbeat: cfg.Push.Heartbeat,
		HeartbeatLine: cfg.Push.HeartbeatLine, QueuedLine: cfg.Push.QueuedLine, TruncatedNote: cfg.Push.TruncatedNote,
		BusyNote: access.DefaultBusy,
		Gate:     n.Health.Gate(term.Bot).Wait, FailedForGood: n.Health.DeliveryFailed, ReplayExpiry: cfg.Push.ReplayExpiry,
		Lag:       n.obs.metrics.PushLag,
		NATSError: n.obs.requestError,
		Logger:    log,
	})
	if err != nil {
		log.Error().Err(err).Msg("pusher not started")
		return
	}
	n.mu.Lock()
	n.pushers[term.Bot] = p
	n.leadingN++
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		if n.pushers[term.Bot] == p {
			delete(n.pushers, term.Bot)
		}
		n.leadingN--
		n.mu.Unlock()
	}()
	var wg sync.WaitGroup
	wg.Go(func() { n.sweep(ctx, term.Bot, log) })
	wg.Go(func() { n.audit(ctx, term, log) })
	if err := p.Run(ctx); err != nil {
		log.Error().Err(err).Str("bot", term.Bot).Msg("pusher stopped")
	}
	wg.Wait()
}

// backfillDelay lets the callbacks a new connection received at once be
// handled (and recorded) before the gap backfill looks for what is missing.
const backfillDelay = 3 * time.Second

// outputInterval is worker.output_interval, or by default half the
// pusher's progress gap at push.budget (1.7 s at 20/min). A progress
// frame shows the latest version written, so the text it shows is up to
// one interval old: at the whole gap, fewer writes but text up to 3.3 s
// old (push lag p99 2 s against 1 s, bench/ramp.md); at half, a frame
// never waits more than half a gap for new text, with 40 % fewer writes
// than the former 1 s.
func outputInterval(cfg config.Config) time.Duration {
	if cfg.Worker.OutputInterval > 0 {
		return cfg.Worker.OutputInterval
	}
	return pusher.ProgressGap(cfg.Push.Budget) / 2
}

// backfillConfig is the gap backfill's configuration on this node: its
// history source, the backfill keys, and the inbound path that knows what
// was handled and answers what was not.
func (n *Node) backfillConfig(log zerolog.Logger) backfill.Config {
	return backfill.Config{Store: n.Store, Source: n.history, Overlap: n.cfg.Backfill.Overlap, MaxMessages: n.cfg.Backfill.MaxMessages,
		Rate: n.cfg.Backfill.Rate, Known: n.Access.Known, Late: n.Access.Late, Logger: log}
}

// backfillPass runs the gap backfill of term's bot once (the health
// monitor calls it at the start of every term, and when a silent
// connection delivers again): messages sent while no node held the
// connection, read by a leader that died before recording them, or held
// only in a lost node's spool. It returns what the last pass did, with the
// messages filled by every pass.
func (n *Node) backfillPass(ctx context.Context, term *election.Term) (backfill.Report, error) {
	log := n.log.With().Str("bot", term.Bot).Int64("term", term.Rev).Logger()
	if n.history == nil {
		log.Info().Msg("gap backfill off (no backfill.history_url): messages missed while no node held the connection are not recovered")
		return backfill.Report{}, errNoHistory
	}
	select {
	case <-n.ready:
	case <-ctx.Done():
		return backfill.Report{}, ctx.Err()
	}
	cfg := n.backfillConfig(log)
	// Where the gap starts is read now, before this connection's own
	// traffic moves the watermark: read after the delay, a gap longer than
	// the overlap lost its older part (found by the 2-minute gap drill).
	since, err := backfill.Since(ctx, cfg, term.Bot, time.Now())
	if err != nil {
		since = time.Time{} // read again in the loop
	}
	if !pause.For(ctx, backfillDelay) {
		return backfill.Report{}, ctx.Err()
	}
	// Up to now: what this term's connection received meanwhile is
	// recorded by now, and is skipped as known.
	until := time.Now()
	filled := 0
	for wait, passes := time.Second, 0; ; {
		var rep backfill.Report
		var err error
		if since.IsZero() {
			since, err = backfill.Since(ctx, cfg, term.Bot, until)
		}
		if err == nil {
			rep, err = backfill.Run(ctx, cfg, term.Bot, since, until)
			filled += rep.Filled
		}
		switch {
		case err == nil && rep.Deferred > 0 && passes < backfillPasses:
			// Missed messages of conversations busy with another task: a
			// later pass answers them once they are free.
			passes++
			log.Info().Interface("backfill", rep).Msg("gap backfill: some missed messages wait for their conversation")
			wait = backfillRetry
		case err == nil:
			if rep.Filled > 0 || rep.NotFilled > 0 || rep.Deferred > 0 {
				log.Warn().Interface("backfill", rep).Msg("gap backfill found missed messages")
			} else {
				log.Info().Interface("backfill", rep).Msg("gap backfill: nothing missed")
			}
			// Still deferred after the last pass: not filled.
			rep.NotFilled += rep.Deferred
			rep.Filled = filled
			return rep, nil
		case ctx.Err() != nil:
			return rep, ctx.Err()
		default:
			log.Warn().Err(err).Dur("retry_in", wait).Msg("gap backfill failed; retrying")
			wait = min(2*wait, 30*time.Second)
		}
		if !pause.For(ctx, wait) {
			return rep, ctx.Err()
		}
	}
}

// audit reads term's bot's history every Backfill.AuditEvery while the
// term lasts, from where its last read ended (less the overlap) to
// auditLag before now, and answers what no connection got, late
// (backfill.Run: what was handled is known and skipped). The passes at a
// term's start and after an incident cover outages; this one covers a
// connection deaf for less time than the silence alarm takes, which opens
// no incident: with answers of 5–60 s a bot's traffic was sparse enough
// that a 30 s silence stayed under the threshold, and the messages WeCom
// kept in those 30 s were answered by nobody (chaos sim-silence). A
// window with messages deferred (their conversation busy) or beyond the
// budget is read again next time, up to auditMaxWindow back.
func (n *Node) audit(ctx context.Context, term *election.Term, log zerolog.Logger) {
	if n.history == nil {
		return
	}
	select {
	case <-n.ready:
	case <-ctx.Done():
		return
	}
	cfg := n.backfillConfig(log)
	from := time.Now() // the term's first pass reads what came before
	for wait := n.cfg.Backfill.AuditEvery; pause.For(ctx, wait); {
		wait = n.cfg.Backfill.AuditEvery
		until := time.Now().Add(-auditLag)
		rep, err := backfill.Run(ctx, cfg, term.Bot, from.Add(-cfg.Overlap), until)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				log.Warn().Err(err).Msg("history audit failed; the next one reads this window again")
			}
			continue
		case rep.Filled > 0 || rep.Deferred > 0 || rep.NotFilled > 0:
			log.Warn().Interface("backfill", rep).Msg("history audit: messages no connection got (answered late)")
		}
		if rep.Deferred > 0 {
			// Missed messages wait for their conversation, busy with the
			// previous missed one: read again as soon as the backfill's
			// own passes would, not a whole period later (sim-silence:
			// several missed messages of one conversation are answered one
			// backfillRetry apart, not one audit apart).
			wait = min(wait, backfillRetry)
		}
		if (rep.Deferred == 0 && rep.NotFilled == 0) || until.Sub(from) > auditMaxWindow {
			from = until
		}
	}
}

// auditLag keeps the history audit off the newest messages, which may
// still be on their way through the connection; auditMaxWindow is how far
// back a window with messages deferred is read again.
const (
	auditLag       = 10 * time.Second
	auditMaxWindow = 10 * time.Minute
)

// missed counts bot's messages in the history created in [since, until)
// that were never handled (the health monitor's check of a silence).
func (n *Node) missed(ctx context.Context, bot string, since, until time.Time) (int, error) {
	if n.history == nil {
		return 0, errNoHistory
	}
	if !n.started() {
		return 0, errors.New("JetStream not bound yet")
	}
	msgs, err := n.history.History(ctx, bot, since, until)
	if err != nil {
		return 0, err
	}
	missed := 0
	for _, m := range msgs {
		known, err := n.Access.Known(ctx, bot, m.MsgID)
		if err != nil {
			return 0, err
		}
		if !known {
			missed++
		}
	}
	return missed, nil
}

// errNoHistory: no history source is configured.
var errNoHistory = health.ErrNoHistory

// healthConfig is the health monitor's configuration from the node's.
func (n *Node) healthConfig() health.Config {
	cfg := n.cfg
	owners := map[string]string{}
	for _, b := range cfg.Bots {
		if b.Owner != "" {
			owners[b.ID] = b.Owner
		}
	}
	h, r := cfg.Health, cfg.Recovery
	return health.Config{
		NodeID: cfg.NodeID, Owners: owners,
		Limits: health.BaselineLimits{Factor: h.SilenceFactor, Floor: h.SilenceFloor, MinWatched: h.SilenceMinWatched,
			MinEvents: float64(h.SilenceMinEvents)},
		RecordInterval: h.RecordInterval, ProbeTimeout: h.ProbeTimeout, ProbeEvery: h.ProbeEvery, Refute: h.Refute,
		StatusLineEvery: cfg.Push.Heartbeat, StreamWindow: cfg.Push.StreamWindow,
		Recovery: recovery.Config{Threshold: r.Threshold, Probes: r.Probes, ProbeInterval: r.ProbeInterval,
			Canary: r.CanaryChat, CanaryGroup: r.CanaryGroup, Observe: r.Observe, DrainFactor: r.DrainFactor},
		Backfill: n.backfillPass,
		Overlap:  cfg.Backfill.Overlap,
		Missed:   n.missed,
		MarkIncomplete: func(ctx context.Context, bot string, chats []string, why string) error {
			return health.MarkIncomplete(ctx, n.Store.Health(), bot, chats, why, time.Now())
		},
		Logger: n.log,
	}
}

// backfillPasses and backfillRetry bound the passes that wait for busy
// conversations: about ten minutes, longer than most answers.
const (
	backfillPasses = 40
	backfillRetry  = 15 * time.Second
)

// SweepInterval is how often a bot's leader runs the lifecycle's sweep
// (deadlines, queue messages of finished tasks).
const SweepInterval = time.Minute

// sweep runs the lifecycle's sweep of bot every SweepInterval until ctx
// (the term) ends.
func (n *Node) sweep(ctx context.Context, bot string, log zerolog.Logger) {
	grace := 2 * n.Store.Options().TaskAckWait
	t := time.NewTicker(SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := n.Lifecycle.Sweep(ctx, bot, n.cfg.Worker.Deadline, grace)
		if err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Str("bot", bot).Msg("task sweep failed; retrying next round")
		}
		if res.Released > 0 || res.Deadline > 0 {
			log.Info().Str("bot", bot).Interface("sweep", res).Msg("task sweep")
		}
	}
}

// api is the node's HTTP API: status, health, and the exec API of tier 2.
func (n *Node) api(ctx context.Context, wg *sync.WaitGroup, cli *clientv3.Client) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		type botView struct {
			Pusher *pusher.Stats `json:"pusher,omitempty"`
		}
		// Spool depth: tasks only on this node's disk until JetStream takes
		// them (-1: unreadable).
		depth, err := n.Spool.Len()
		if err != nil {
			depth = -1
		}
		view := struct {
			node.Info
			JetStream bool               `json:"jetstream"` // bound: false while the node only spools
			Access    access.Stats       `json:"access"`
			Dispatch  dispatch.Stats     `json:"dispatch"`
			Worker    workerView         `json:"worker"`
			Spool     spoolView          `json:"spool"`
			Pushers   map[string]botView `json:"pushers"`
		}{Info: n.Node.Info(), Access: n.Access.Stats(), Pushers: map[string]botView{},
			Worker: workerView{Slots: n.cfg.Worker.Slots}, Spool: spoolView{Depth: depth}}
		if n.started() {
			view.JetStream, view.Dispatch, view.Worker.Busy = true, n.Dispatch.Stats(), n.Worker.Busy()
		}
		n.mu.Lock()
		for bot, p := range n.pushers {
			s := p.Stats()
			view.Pushers[bot] = botView{Pusher: &s}
		}
		n.mu.Unlock()
		writeJSON(w, http.StatusOK, view)
	})
	n.obs.routes(mux) // GET /metrics, /healthz (alive), /readyz (ready)
	if page := n.demoPage(); page != nil {
		mux.Handle(demoui.Path, page) // the demo's chat and live view, with a simulator only
	}
	// Tier 2: the one endpoint that acts, behind the cluster's token. The
	// others are GET only and change nothing.
	mux.Handle("POST "+dispatch.ExecPath, requireToken(n.token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m task.Message
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&m); err != nil || m.TaskID == "" || m.Bot == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want a task message: {\"task_id\",\"bot\",\"msgid\",\"chat\",\"question\",…}"})
			return
		}
		if ctx.Err() != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "node stopping"})
			return
		}
		if !n.started() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "JetStream not reachable from this node yet"})
			return
		}
		if err := n.Worker.Go(ctx, m, string(dispatch.TierFixed), wg); err != nil {
			// Bounded by the worker's slots (worker.ErrNoSlot): nothing
			// was started, so the caller may send the task elsewhere (the
			// dispatcher falls back) or again once a running one ends.
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{
				"error": fmt.Sprintf("%v; the task was not started: send it to another node, or again later", err)})
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"task_id": m.TaskID})
	})))
	return mux
}

type workerView struct {
	Busy  int `json:"busy"`  // tasks running now
	Slots int `json:"slots"` // configured slots
}

type spoolView struct {
	Depth int `json:"depth"` // tasks held on this node's disk for the queue
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
