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
	"sync"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/dispatch"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/worker"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Options are what Run needs besides the validated configuration.
type Options struct {
	Config   config.Config // validated, secrets resolved
	Etcd     *clientv3.Client
	NATSURL  string
	Listener net.Listener // the node API's
	Version  string
	// TaskAckWait, if set, overrides the task queue's ack wait (tests).
	TaskAckWait time.Duration
	Logger      zerolog.Logger
	// Ready, if set, is called once every component is running.
	Ready func(*Node)
}

// Node is a running node, for status and tests.
type Node struct {
	Node     *node.Node
	Store    *jetstream.Store
	Access   *access.Access
	Dispatch *dispatch.Dispatcher
	Worker   *worker.Worker
	// Lifecycle is the one writer of task records on this node.
	Lifecycle *task.Lifecycle

	mu      sync.Mutex
	pushers map[string]*pusher.Pusher // bot → the current term's pusher
	budgets map[string]*pace.Budget   // bot → its conversations' budget
	cfg     config.Config
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
func Run(ctx context.Context, o Options) error {
	cfg := o.Config
	log := o.Logger.With().Str("node", cfg.NodeID).Logger()

	// Fail fast while JetStream is away (ReconnectBufSize -1): a publish
	// then errors at once and the dispatcher falls back, instead of
	// waiting in a buffer that may deliver later.
	nc, err := nats.Connect(o.NATSURL, nats.Name("botctl "+cfg.NodeID), nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		return fmt.Errorf("connect NATS %s: %w", o.NATSURL, err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	store, err := jetstream.Declare(dctx, js, jetstream.Options{Replicas: cfg.NATS.Replicas, TaskAckWait: o.TaskAckWait, Logger: log})
	cancel()
	if err != nil {
		return fmt.Errorf("declare JetStream streams and buckets: %w", err)
	}

	lc := task.NewLifecycle(store, cfg.NodeID, log)
	n := &Node{Store: store, Lifecycle: lc, pushers: map[string]*pusher.Pusher{}, budgets: map[string]*pace.Budget{}, cfg: cfg}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	spool, err := jetstream.OpenSpool(filepath.Join(cfg.DataDir, "spool.db"))
	if err != nil {
		return fmt.Errorf("open spool: %w", err)
	}
	defer spool.Close()
	fwd, err := jetstream.NewForwarder(jetstream.ForwarderConfig{
		Spool: spool,
		Publish: store.SpoolPublisher(func(e jetstream.SpoolEntry, res jetstream.PublishResult, err error) {
			log.Info().Str("bot", e.Bot).Str("msgid", e.MsgID).AnErr("result", err).Bool("duplicate", res.Duplicate).Msg("spooled task forwarded")
			if err != nil {
				// Refused on the way out of the spool (the conversation got
				// a newer task meanwhile, or the task was rejected): the user
				// was told "received", so record the failure for the pusher
				// to tell them, instead of dropping it in silence.
				spoolRefused(context.WithoutCancel(ctx), store, lc, e, err, log)
				if p := n.Pusher(e.Bot); p != nil {
					p.Notify(task.ID(e.Bot, e.MsgID))
				}
			}
		}),
		Logger: log,
	})
	if err != nil {
		return err
	}

	backend, err := ai.New(cfg.AI)
	if err != nil {
		return err
	}

	var (
		leadingMu sync.Mutex
		leading   int
	)
	n.Worker, err = worker.New(worker.Config{
		NodeID: cfg.NodeID, Slots: cfg.Worker.Slots, LeaderSlots: cfg.Worker.LeaderSlots, AIConcurrency: cfg.AI.MaxConcurrency,
		Leading: func() bool { leadingMu.Lock(); defer leadingMu.Unlock(); return leading > 0 },
		Backend: backend, Store: store, Lifecycle: lc, Deadline: cfg.Worker.Deadline, Logger: log,
	})
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()

	n.Dispatch, err = dispatch.New(dispatch.Config{
		Publish: store.PublishTask,
		Spool: func(m task.Message, payload []byte) error {
			err := spool.Append(jetstream.SpoolEntry{Bot: m.Bot, Conversation: m.Chat, MsgID: m.MsgID, Payload: payload, Received: m.Received})
			fwd.Kick()
			return err
		},
		FixedWorker: cfg.Dispatch.FixedWorker,
		Local: func(m task.Message) error {
			wg.Go(func() { n.Worker.Execute(workCtx, m, string(dispatch.TierLocal)) })
			return nil
		},
		Logger: log,
	})
	if err != nil {
		return err
	}
	n.Access, err = access.New(access.Config{
		NodeID: cfg.NodeID, Store: store, Dispatch: n.Dispatch.Dispatch,
		AllowUsers: cfg.Access.AllowUsers, AllowChats: cfg.Access.AllowChats,
		MaxQuestionBytes: cfg.Access.MaxQuestionBytes,
		Texts:            access.Texts{Receipt: cfg.Access.ReceiptText, Welcome: cfg.Access.WelcomeText},
		Budget:           n.Budget,
		Lifecycle:        lc,
		Dispatched: func(bot, taskID string) {
			if p := n.Pusher(bot); p != nil {
				p.Notify(taskID)
			}
		},
		Logger: log,
	})
	if err != nil {
		return err
	}

	n.Node, err = node.New(o.Etcd, node.Config{
		NodeID: cfg.NodeID, Env: cfg.Env, Version: o.Version, Address: "http://" + o.Listener.Addr().String(),
		Slots: cfg.Worker.Slots, Bots: cfg.Bots,
		WeCom:    wecom.Config{URL: cfg.WeCom.URL, HeartbeatInterval: cfg.WeCom.HeartbeatInterval, AckTimeout: cfg.WeCom.AckTimeout},
		Election: election.Config{TTL: cfg.Election.TTL, SafetyMargin: cfg.Election.SafetyMargin},
		Inbound:  n.Access,
		Leading: func(ctx context.Context, term *election.Term, conn *wecom.Conn) {
			p, err := pusher.New(pusher.Config{
				Bot: term.Bot, NodeID: cfg.NodeID, Term: term.Rev, Conn: conn, Store: store, Lifecycle: lc,
				Budget: n.Budget(term.Bot), StreamWindow: cfg.Push.StreamWindow, Heartbeat: cfg.Push.Heartbeat,
				HeartbeatLine: cfg.Push.HeartbeatLine, QueuedLine: cfg.Push.QueuedLine, TruncatedNote: cfg.Push.TruncatedNote,
				Logger: log,
			})
			if err != nil {
				log.Error().Err(err).Msg("pusher not started")
				return
			}
			leadingMu.Lock()
			leading++
			leadingMu.Unlock()
			n.mu.Lock()
			n.pushers[term.Bot] = p
			n.mu.Unlock()
			defer func() {
				n.mu.Lock()
				if n.pushers[term.Bot] == p {
					delete(n.pushers, term.Bot)
				}
				n.mu.Unlock()
				leadingMu.Lock()
				leading--
				leadingMu.Unlock()
			}()
			var lwg sync.WaitGroup
			lwg.Go(func() { n.sweep(ctx, term.Bot, log) })
			if err := p.Run(ctx); err != nil {
				log.Error().Err(err).Str("bot", term.Bot).Msg("pusher stopped")
			}
			lwg.Wait()
		},
		Logger: log,
	})
	if err != nil {
		return err
	}

	srv := &http.Server{Handler: n.api(workCtx, &wg, o.Etcd), ReadHeaderTimeout: 5 * time.Second}
	wg.Go(func() { srv.Serve(o.Listener) })
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	wg.Go(func() { fwd.Run(workCtx) })
	wg.Go(func() {
		if err := n.Worker.Run(workCtx); err != nil {
			log.Error().Err(err).Msg("worker stopped: this node computes nothing")
		}
	})
	wg.Go(func() {
		if err := lc.WatchMaxDeliveries(workCtx); err != nil {
			log.Error().Err(err).Msg("tasks past their last delivery are found by the sweep only")
		}
	})
	if o.Ready != nil {
		o.Ready(n)
	}
	err = n.Node.Run(ctx) // resigns every term after closing its connection
	n.Access.Wait()
	stopWork()
	return err
}

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

// spoolRefused records a spooled task that the queue refused when it was
// forwarded as failed, with the reason, unless the task is under way or
// answered (then the refusal was the queue holding this very task).
func spoolRefused(ctx context.Context, store *jetstream.Store, lc *task.Lifecycle, e jetstream.SpoolEntry, cause error, log zerolog.Logger) {
	var m task.Message
	if err := json.Unmarshal(e.Payload, &m); err != nil || m.TaskID == "" {
		log.Error().Err(err).Str("msgid", e.MsgID).Msg("spooled entry unreadable; dropped")
		return
	}
	reason := "the conversation had a newer question when this one was forwarded after an outage; please ask again"
	if errors.Is(cause, jetstream.ErrConversationBusy) {
		if msg, err := store.ConversationTask(ctx, m.Bot, m.Chat); err == nil && msg != nil {
			var q task.Message
			if json.Unmarshal(msg.Data, &q) == nil && q.TaskID == m.TaskID {
				return // the queue holds this task already
			}
		}
	} else {
		reason = "refused by the task queue after an outage: " + cause.Error()
	}
	if _, err := lc.Refused(ctx, m, reason); err != nil {
		log.Error().Err(err).Str("task", m.TaskID).Msg("spooled task refused, and its record not updated")
	}
}

// api is the node's HTTP API: status, health, and the exec API of tier 2.
func (n *Node) api(ctx context.Context, wg *sync.WaitGroup, cli *clientv3.Client) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		type botView struct {
			Pusher *pusher.Stats `json:"pusher,omitempty"`
		}
		view := struct {
			node.Info
			Access   access.Stats       `json:"access"`
			Dispatch dispatch.Stats     `json:"dispatch"`
			Pushers  map[string]botView `json:"pushers"`
		}{Info: n.Node.Info(), Access: n.Access.Stats(), Dispatch: n.Dispatch.Stats(), Pushers: map[string]botView{}}
		n.mu.Lock()
		for bot, p := range n.pushers {
			s := p.Stats()
			view.Pushers[bot] = botView{Pusher: &s}
		}
		n.mu.Unlock()
		writeJSON(w, http.StatusOK, view)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		hctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if _, err := cli.Get(hctx, "health-probe"); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "etcd unreachable", "error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("POST "+dispatch.ExecPath, func(w http.ResponseWriter, r *http.Request) {
		var m task.Message
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&m); err != nil || m.TaskID == "" || m.Bot == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want a task message: {\"task_id\",\"bot\",\"msgid\",\"chat\",\"question\",…}"})
			return
		}
		if ctx.Err() != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "node stopping"})
			return
		}
		wg.Go(func() { n.Worker.Execute(ctx, m, string(dispatch.TierFixed)) })
		writeJSON(w, http.StatusAccepted, map[string]string{"task_id": m.TaskID})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
