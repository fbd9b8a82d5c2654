package serve

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/botctl/botctl/internal/httpjson"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/heal/alert"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/metrics"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/sdnotify"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// observer is the node's observability: its metrics (hot-path
// instruments plus a collector that reads the node's state at scrape
// time), liveness and readiness, and systemd's notify protocol.
type observer struct {
	n       *Node
	nc      *nats.Conn
	etcd    *clientv3.Client
	metrics *metrics.Node
	history *etcdHistory

	mu      sync.Mutex
	conns   map[string]*wecom.Conn  // bot → the connection of the term this node leads
	retired map[string]pusher.Stats // bot → counters of ended terms' pushers, so totals never go down
	tasks   map[[3]string]int       // cached undelivered tasks by bot, exec, delivery
	tasksAt time.Time               // when tasks was read
}

// tasksTTL bounds how often a scrape reads the undelivered index (one
// record read per undelivered task of each bot led here).
const tasksTTL = 10 * time.Second

func newObserver(n *Node, nc *nats.Conn, cli *clientv3.Client) *observer {
	o := &observer{n: n, nc: nc, etcd: cli, metrics: metrics.New(), conns: map[string]*wecom.Conn{}, retired: map[string]pusher.Stats{},
		history: &etcdHistory{cli: cli, log: n.log}}
	o.metrics.Registry.MustRegister(o, o.history, skewCollector{n.skew}, breakerCollector{n.bots}, // breakers: aibackends.go
		settingsCollector{n.bots}) // refused overrides: settingsrefused.go
	nc.SetDisconnectErrHandler(func(_ *nats.Conn, err error) {
		if err != nil {
			o.metrics.NATSError("disconnect", "")
		}
	})
	nc.SetErrorHandler(func(*nats.Conn, *nats.Subscription, error) { o.metrics.NATSError("async", "") })
	return o
}

// requestError counts a failed JetStream request of the node's hot paths
// (dispatch's publish; the pusher's record, output and watermark reads and
// writes; the worker's queue requests and a running task's output, record
// and context reads and writes: their Config.NATSError, the worker's
// Config.Metrics) as
// botctl_nats_errors_total{kind="request",op=op}, beside the collector's
// own failed reads (op "scrape"). op is one of a few names each component
// documents, so the series stay few.
func (o *observer) requestError(op string) { o.metrics.NATSError("request", op) }

// NATSError is requestError, as the dispatcher's, the worker's and the
// pusher's Metrics.
func (o *observer) NATSError(op string) { o.requestError(op) }

// CorruptRecord counts a task record skipped because it does not decode
// (botctl_corrupt_records_total) and has the bot's health open a data
// incident for it, once per record: the lifecycle's task.Corruption.
func (o *observer) CorruptRecord(bot, id, where string, err error) {
	o.metrics.CorruptRecord(bot, where)
	o.n.Health.CorruptRecord(bot, id, where, err)
}

// PushLag observes a progress frame's push lag (the pusher's Metrics).
func (o *observer) PushLag(bot string, d time.Duration) { o.metrics.PushLag(bot, d) }

// term is called when a term of bot starts leading on conn; the returned
// func when it ends, with its pusher's last counters (nil: none ran).
func (o *observer) term(bot string, conn *wecom.Conn) func(*pusher.Pusher) {
	o.metrics.TermStarted(bot)
	o.mu.Lock()
	o.conns[bot] = conn
	o.mu.Unlock()
	return func(p *pusher.Pusher) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.conns[bot] == conn {
			delete(o.conns, bot)
		}
		if p != nil {
			o.retired[bot] = addStats(o.retired[bot], p.Stats())
		}
	}
}

func addStats(a, b pusher.Stats) pusher.Stats {
	a.Frames += b.Frames
	a.Pushes += b.Pushes
	a.Delivered += b.Delivered
	a.Truncated += b.Truncated
	a.Failed += b.Failed
	a.Errors += b.Errors
	a.Ambiguous += b.Ambiguous
	a.Throttled += b.Throttled
	a.Flushes += b.Flushes
	a.QuotaRefused += b.QuotaRefused
	a.Held += b.Held
	return a
}

// routes adds /metrics, /healthz (liveness) and /readyz (readiness).
func (o *observer) routes(mux *http.ServeMux) {
	mux.Handle("GET /metrics", o.metrics.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		// Alive: the process answers. Nothing external is asked, so a
		// supervisor never restarts a node for an etcd outage.
		httpjson.WriteIndented(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		rd := o.readiness(ctx)
		code := http.StatusOK
		if !rd.Ready {
			code = http.StatusServiceUnavailable
		}
		httpjson.WriteIndented(w, code, rd)
	})
}

// Readiness is GET /readyz's body.
type Readiness struct {
	Ready     bool              `json:"ready"`
	Etcd      string            `json:"etcd"`      // "ok" or why not
	NATS      string            `json:"nats"`      // "ok" or why not
	JetStream bool              `json:"jetstream"` // streams and buckets bound
	Bots      map[string]string `json:"bots"`      // bots this node leads: "subscribed" or why not
	Reasons   []string          `json:"reasons,omitempty"`
	// Warnings do not make the node unready: e.g. an etcd that does not
	// compact its history (it works until its space quota is full), a
	// bot's override this node refuses (the bot is served all the same).
	Warnings []string `json:"warnings,omitempty"`
}

// readiness: etcd answers, NATS is connected and JetStream bound, and
// every bot this node has won has its WeCom connection subscribed.
func (o *observer) readiness(ctx context.Context) Readiness {
	rd := Readiness{Etcd: "ok", NATS: "ok", JetStream: o.n.started(), Bots: map[string]string{}}
	// Under botctl's prefix: a role limited to /botctl/ (etcd RBAC) may read it.
	if _, err := o.etcd.Get(ctx, etcdkeys.Default.HealthProbe()); err != nil {
		o.metrics.EtcdError("probe")
		rd.Etcd = err.Error()
		rd.Reasons = append(rd.Reasons, "etcd unreachable: "+err.Error())
	}
	if !o.nc.IsConnected() {
		rd.NATS = "not connected (" + strings.ToLower(o.nc.Status().String()) + ")"
		rd.Reasons = append(rd.Reasons, "NATS "+rd.NATS)
	} else if !rd.JetStream {
		rd.Reasons = append(rd.Reasons, "JetStream streams and buckets not declared yet")
	}
	o.mu.Lock()
	conns := make(map[string]*wecom.Conn, len(o.conns))
	for b, c := range o.conns {
		conns[b] = c
	}
	o.mu.Unlock()
	for bot, st := range o.n.Node.Info().Bots {
		switch st.State {
		case node.StateConnecting:
			rd.Bots[bot] = "won the election; WeCom connection not subscribed yet"
		case node.StateDraining:
			rd.Bots[bot] = "draining: connection closed, resigning"
		case node.StateLeader:
			if c := conns[bot]; c != nil && c.Err() != nil {
				rd.Bots[bot] = "connection closed: " + c.Err().Error()
			} else {
				rd.Bots[bot] = "subscribed"
			}
		default:
			continue
		}
		if rd.Bots[bot] != "subscribed" {
			rd.Reasons = append(rd.Reasons, "bot "+bot+": "+rd.Bots[bot])
		}
	}
	if why, off := o.n.skew.Off(); off {
		rd.Reasons = append(rd.Reasons, why)
	}
	if rd.Etcd == "ok" {
		if w := o.history.warning(ctx); w != "" {
			rd.Warnings = append(rd.Warnings, w)
		}
	}
	rd.Warnings = append(rd.Warnings, o.n.bots.Warnings()...) // overrides refused: the bots are served all the same
	sort.Strings(rd.Reasons)
	rd.Ready = len(rd.Reasons) == 0
	return rd
}

// notify tells systemd the node serves (READY=1), pings its watchdog
// while the node is alive, and says STOPPING=1 when ctx ends. Outside
// systemd it does nothing.
func (o *observer) notify(ctx context.Context) {
	if ok, err := sdnotify.Notify(sdnotify.Ready); err != nil {
		o.n.log.Warn().Err(err).Msg("sd_notify READY failed")
	} else if ok {
		o.n.log.Info().Msg("told systemd: READY=1")
	}
	sdnotify.RunWatchdog(ctx, clock.Real, sdnotify.WatchdogInterval(), o.alive)
	if ctx.Err() != nil {
		sdnotify.Notify(sdnotify.Stopping)
	}
}

// aliveWithin bounds the watchdog's check.
const aliveWithin = 5 * time.Second

// alive checks, in process, that the node is not wedged: the locks that
// every status, metrics and term path takes are free within aliveWithin.
// (Not an HTTP request to the node's own API: that API may require TLS
// or a token, and a hung process must not look alive because the kernel
// still accepts connections.) A wedged node stops the pings and systemd
// restarts it after WatchdogSec.
func (o *observer) alive() bool {
	done := make(chan struct{})
	go func() { // on a deadlock this goroutine stays blocked until systemd kills the process
		// Each lock is taken only to see that it can be.
		o.n.leaders.mu.Lock()
		o.n.leaders.mu.Unlock() //lint:ignore SA2001 the lock is taken only to see that it can be
		o.mu.Lock()
		o.mu.Unlock() //lint:ignore SA2001 the lock is taken only to see that it can be
		close(done)
	}()
	t := clock.Real.NewTimer(aliveWithin)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C():
		o.n.log.Error().Dur("within", aliveWithin).Msg("node wedged (its locks not free): no watchdog ping")
		return false
	}
}

// Descriptions of what the collector reads at scrape time.
var (
	descLeader     = desc("bot_leader", "1 while this node leads the bot (holds its WeCom connection), else 0.", "bot")
	descBotState   = desc("bot_state", "1 for this node's current state of the bot (starting, standby, connecting, leader, draining, gated, needs_human, backoff, clock_off, stopped).", "bot", "state")
	descTerm       = desc("bot_term", "The election revision of the term this node leads the bot in (0: not leading).", "bot")
	descConnected  = desc("wecom_connected", "1 while the bot's WeCom connection held by this node is open and subscribed.", "bot")
	descPusher     = desc("pusher_events_total", "The bot's pusher on this node, summed over its terms: frames, pushes, delivered, truncated, failed, errors, ambiguous, throttled (deferred by the per-conversation budget), quota_refused (45009: each lowered the conversation's budget), held (half-open gate), stalled (steps deferred while the connection owed an ack past 500 ms).", "bot", "event")
	descActive     = desc("pusher_active_tasks", "Tasks the bot's pusher is delivering now.", "bot")
	descTasks      = desc("tasks", "Undelivered tasks of the bots this node leads, by execution and delivery state (from the undelivered index; refreshed at most every 10s).", "bot", "exec", "delivery")
	descSlotsBusy  = desc("worker_slots_busy", "Tasks running on this node's worker.")
	descSlots      = desc("worker_slots", "This node's configured worker slots.")
	descQueue      = desc("queue_depth", "Tasks in the JetStream work queue: pending (not yet delivered to a worker) and ack_pending (running somewhere).", "state")
	descSpool      = desc("spool_depth", "Tasks held in this node's local spool until JetStream takes them.")
	descMedia      = desc("media_store_bytes", "Bytes the media object store holds now (the same store for every node): users' files of tasks in flight and replies' images and files.")
	descMediaMax   = desc("media_store_max_bytes", "The media object store's bound as deployed (media.max_store_bytes, unless the deployment keeps another): past it a file is refused and its user told storage is full.")
	descIncidents  = desc("incidents_open", "Open incidents of each configured bot, by kind (outage, data, ai).", "bot", "kind")
	descDispatch   = desc("dispatch_total", "Dispatch outcomes on this node (queued, busy, duplicates, fixed, local, spooled, failed).", "outcome")
	descFallbacks  = desc("dispatch_fallbacks_total", "Dispatch fallbacks between tiers (queue→fixed, fixed→local, …).", "path")
	descInbound    = desc("inbound_total", "Inbound messages on this node by outcome (received, duplicates, refused, invalid, commands, busy, dispatched, failed, suppressed, backfilled, early_receipts, early_missed, limited).", "outcome")
	descJetStream  = desc("jetstream_bound", "1 once JetStream's streams and buckets are declared on this node.")
	descNATSUp     = desc("nats_connected", "1 while this node's NATS connection is connected.")
	descNATSReconn = desc("nats_reconnects_total", "Reconnects of this node's NATS connection.")
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(metrics.Namespace+"_"+name, help, labels, nil)
}

// Describe implements prometheus.Collector.
func (o *observer) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeader, descBotState, descTerm, descConnected, descPusher, descActive, descTasks,
		descSlotsBusy, descSlots, descQueue, descSpool, descMedia, descMediaMax, descIncidents, descDispatch, descFallbacks, descInbound, descJetStream,
		descNATSUp, descNATSReconn} {
		ch <- d
	}
}

var botStates = []node.BotState{node.StateStarting, node.StateStandby, node.StateConnecting, node.StateLeader, node.StateDraining,
	node.StateGated, node.StateNeedsHuman, node.StateBackoff, node.StateClockOff, node.StateStopped, node.StateRefused}

// Collect implements prometheus.Collector: the node's state, now.
func (o *observer) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	n := o.n
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()

	o.mu.Lock()
	conns := make(map[string]*wecom.Conn, len(o.conns))
	for b, c := range o.conns {
		conns[b] = c
	}
	pstats := make(map[string]pusher.Stats, len(o.retired))
	for b, s := range o.retired {
		pstats[b] = s
	}
	o.mu.Unlock()
	active := map[string]int{}
	n.leaders.each(func(bot string, p *pusher.Pusher) {
		s := p.Stats()
		pstats[bot] = addStats(pstats[bot], s)
		active[bot] = s.Active
	})

	var leading []string
	for bot, st := range n.Node.Info().Bots {
		leader := st.State == node.StateLeader
		gauge(descLeader, b2f(leader), bot)
		for _, s := range botStates {
			gauge(descBotState, b2f(st.State == s), bot, string(s))
		}
		term := int64(0)
		if leader {
			term = st.TermRev
			leading = append(leading, bot)
		}
		gauge(descTerm, float64(term), bot)
		c := conns[bot]
		gauge(descConnected, b2f(leader && c != nil && c.Err() == nil), bot)
		gauge(descActive, float64(active[bot]), bot)
		s := pstats[bot]
		for ev, v := range map[string]int64{"frames": s.Frames, "pushes": s.Pushes, "delivered": s.Delivered, "truncated": s.Truncated,
			"failed": s.Failed, "errors": s.Errors, "ambiguous": s.Ambiguous, "throttled": s.Throttled, "flushes": s.Flushes, "quota_refused": s.QuotaRefused, "held": s.Held, "stalled": s.Stalled} {
			counter(descPusher, float64(v), bot, ev)
		}
	}

	a := n.Access.Stats()
	for k, v := range map[string]int64{"received": a.Received, "duplicates": a.Duplicates, "refused": a.Refused, "invalid": a.Invalid,
		"commands": a.Commands, "busy": a.Busy, "dispatched": a.Dispatched, "failed": a.Failed, "suppressed": a.Suppressed, "backfilled": a.Backfilled,
		"early_receipts": a.EarlyReceipts, "early_missed": a.EarlyMissed, "limited": a.Limited} {
		counter(descInbound, float64(v), k)
	}
	if depth, err := n.Spool.Len(); err == nil {
		gauge(descSpool, float64(depth))
	}
	gauge(descSlots, float64(n.cfg.Worker.Slots))
	gauge(descNATSUp, b2f(o.nc.IsConnected()))
	counter(descNATSReconn, float64(o.nc.Stats().Reconnects))
	bound := n.started()
	gauge(descJetStream, b2f(bound))
	if !bound {
		return
	}
	gauge(descSlotsBusy, float64(n.Worker.Busy()))
	d := n.Dispatch.Stats()
	for k, v := range map[string]int64{"queued": d.Queued, "busy": d.Busy, "duplicates": d.Duplicates, "fixed": d.Fixed,
		"local": d.Local, "spooled": d.Spooled, "failed": d.Failed} {
		counter(descDispatch, float64(v), k)
	}
	for path, v := range d.Fallbacks {
		counter(descFallbacks, float64(v), path)
	}
	if ci, err := n.Store.Workers().Info(ctx); err == nil {
		gauge(descQueue, float64(ci.NumPending), "pending")
		gauge(descQueue, float64(ci.NumAckPending), "ack_pending")
	} else {
		o.metrics.NATSError("request", "scrape")
	}
	gauge(descMediaMax, float64(n.Store.MediaMaxBytes()))
	if used, err := n.Store.MediaBytes(ctx); err == nil {
		gauge(descMedia, float64(used))
	} else {
		o.metrics.NATSError("request", "scrape")
	}
	incs := incident.NewStore(n.Store.Incidents())
	for _, b := range n.cfg.Bots {
		for _, kind := range []incident.Kind{incident.Outage, incident.Data, incident.AI} {
			inc, err := incs.OpenFor(ctx, b.ID, kind)
			if err != nil {
				o.metrics.NATSError("request", "scrape")
				continue
			}
			gauge(descIncidents, b2f(inc != nil), b.ID, string(kind))
		}
	}
	for k, v := range o.taskCounts(ctx, leading) {
		gauge(descTasks, float64(v), k[0], k[1], k[2])
	}
}

// taskCounts counts the undelivered tasks of bots by state, from the
// undelivered index, cached for tasksTTL.
func (o *observer) taskCounts(ctx context.Context, bots []string) map[[3]string]int {
	o.mu.Lock()
	if o.tasks != nil && time.Since(o.tasksAt) < tasksTTL {
		defer o.mu.Unlock()
		return o.tasks
	}
	o.mu.Unlock()
	counts := map[[3]string]int{}
	for _, bot := range bots {
		ids, err := o.n.Store.UndeliveredTasks(ctx, bot)
		if err != nil {
			o.metrics.NATSError("request", "scrape")
			continue
		}
		for _, id := range ids {
			r, err := o.n.Lifecycle.Get(ctx, id)
			if err != nil {
				continue // delivered and forgotten meanwhile, or JetStream away
			}
			if r.Delivery.Finished() {
				continue
			}
			counts[[3]string{bot, string(r.Exec), string(r.Delivery)}]++
		}
	}
	o.mu.Lock()
	o.tasks, o.tasksAt = counts, time.Now()
	o.mu.Unlock()
	return counts
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// countSends counts every send of sink in botctl_alerts_sent_total.
func countSends(sink alert.Sink) alert.Sink { return countingSink{sink} }

type countingSink struct{ alert.Sink }

func (c countingSink) Send(ctx context.Context, a alert.Alert) error {
	err := c.Sink.Send(ctx, a)
	sink, _, _ := strings.Cut(c.Name(), " ") // its kind; the rest is a (redacted) URL
	metrics.AlertSent(sink, string(a.Kind), string(a.Level), err == nil)
	return err
}
