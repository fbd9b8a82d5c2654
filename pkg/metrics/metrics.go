// Package metrics holds a botctl node's Prometheus instruments: the few
// fed from hot paths (frames, receipt latency, push lag, term starts,
// etcd and NATS errors, alerts sent). Everything that is state (leaders,
// tasks, queue and spool depth, incidents) is read at scrape time by a
// collector in pkg/serve, not counted here.
//
// Each node has its own registry (New), never Prometheus's global one:
// several nodes in one process (tests, the demo) do not collide. The one
// exception is AlertsSent, a process-wide counter that every node's
// registry exposes, so the alert path can count without a handle.
//
// Packages on hot paths (pkg/wecom, pkg/access, pkg/pusher) do not import
// this package: they expose small hooks, and pkg/serve plugs Node in.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/botctl/botctl/pkg/buildinfo"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric name.
const Namespace = "botctl"

// alertsSent is the process-wide counter behind AlertSent.
var alertsSent = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: Namespace, Name: "alerts_sent_total",
	Help: "Attempts to send an alert, by sink, kind (open, recovered, escalated, merged, flapping, synthetic), level (auto, human) and result (ok, failed).",
}, []string{"sink", "kind", "level", "result"})

// AlertSent counts one attempt to send an alert of kind and level to
// sink (ok: the sink took it). Safe from any goroutine; pkg/serve counts
// every sink's sends with it.
func AlertSent(sink, kind, level string, ok bool) {
	result := "ok"
	if !ok {
		result = "failed"
	}
	alertsSent.WithLabelValues(sink, kind, level, result).Inc()
}

// Node is one node's instruments and registry.
type Node struct {
	Registry *Registry
	*Model   // the AI backends' calls and the limits (model.go)

	framesIn   *prometheus.CounterVec
	framesOut  *prometheus.CounterVec
	receipt    *prometheus.HistogramVec
	stages     *prometheus.HistogramVec
	pushLag    *prometheus.HistogramVec
	terms      *prometheus.CounterVec
	etcdErrors *prometheus.CounterVec
	natsErrors *prometheus.CounterVec
	corrupt    *prometheus.CounterVec
	feedback   *prometheus.CounterVec
	incidents  *prometheus.HistogramVec
}

// New makes a node's registry with its instruments, the process and Go
// runtime collectors, and AlertsSent.
func New() *Node {
	m := &Node{
		Registry: NewRegistry(),
		framesIn: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "wecom_frames_in_total",
			Help: "Callback frames read from WeCom, by bot and cmd."}, []string{"bot", "cmd"}),
		framesOut: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "wecom_frames_out_total",
			Help: "Frames sent to WeCom, by bot, cmd and the ack's errcode (-1: no trustworthy ack: timeout, closed, ambiguous; heartbeat pings are counted when acked)."}, []string{"bot", "cmd", "errcode"}),
		receipt: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "receipt_latency_seconds",
			Help:    "From a message's callback read off the connection to WeCom's ack of its receipt frame.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"bot"}),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "inbound_stage_seconds",
			Help:    "Steps on a message's way to its receipt, by bot and stage: slot (the callback read → its handling begins), dedupe (the task bucket's read, beside the dispatch; skipped for a fresh callback), dispatch (the queue publish: the conversation's mutex), receipt_frame (the receipt's send to WeCom's ack).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"bot", "stage"}),
		pushLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "push_lag_seconds",
			Help:    "From a worker's output write to WeCom's ack of the frame showing it.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 11)}, []string{"bot"}),
		terms: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "leader_terms_total",
			Help: "Terms this node started leading (connection up), by bot: a rising rate is leadership flapping."}, []string{"bot"}),
		etcdErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "etcd_errors_total",
			Help: "etcd requests of this node that failed, by operation (probe: /readyz's; gate, campaign, registry, transition: the node's election and registry loops; alert_session, alert_campaign: the alerter's election)."}, []string{"op"}),
		natsErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "nats_errors_total",
			Help: "NATS errors of this node's connection, by kind (disconnect, async, request: JetStream requests that failed) and, for requests, op (publish; fetch, ack, remove, hold: the worker's queue requests; record_read, record_write, output_read, output_write, output_watch, watermark_read, watermark_write, context_read, context_write: the pusher's and the worker's reads and writes of the store; scrape: this scrape's reads)."}, []string{"kind", "op"}),
		corrupt: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "corrupt_records_total",
			Help: "Task records skipped because they do not decode, by bot and where (rebuild: a pusher's term start; push: a pusher's step; spool: the spool's way out, which drops the entry; sweep: the leader's sweep). Each pass that meets one counts it: it rises for as long as the record stays."}, []string{"bot", "where"}),
		feedback: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "feedback_total",
			Help: "Users' verdicts on answers (WeCom's feedback_event) this node received, by bot and kind (accurate, inaccurate, canceled: a verdict withdrawn, unknown). Each is recorded with its task: botctl feedback; an event delivered again is counted once."}, []string{"bot", "kind"}),
		incidents: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "incident_seconds",
			Help:    "Spans of the incidents this node closed, by bot, kind (outage, data, ai) and span: t1 (drop to detected), t2 (detected to the first action), t3 (recovered to data complete). A span the incident does not have is not observed.",
			Buckets: []float64{1, 3, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600}}, []string{"bot", "kind", "span"}),
	}
	m.Registry.MustRegister(m.framesIn, m.framesOut, m.receipt, m.stages, m.pushLag, m.terms, m.etcdErrors, m.natsErrors, m.corrupt, m.feedback, m.incidents, alertsSent, schema.Newer,
		buildInfo(buildinfo.Get()), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Model = newModel(m.Registry)
	return m
}

// buildInfo is botctl_build_info{version,commit,goversion}, always 1: the
// build a node runs, to join with any other series (a rolling upgrade
// shows as two versions at once).
func buildInfo(in buildinfo.Info) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "build_info",
		Help:        "Always 1; its labels name the build this node runs: version (\"dev\" for a development build), commit, goversion.",
		ConstLabels: prometheus.Labels{"version": in.Version, "commit": in.Commit, "goversion": in.Go}},
		func() float64 { return 1 })
}

// IncidentClosed observes a closed incident's spans
// (health.IncidentMetrics); a zero span is one it does not have.
func (m *Node) IncidentClosed(bot, kind string, t1, t2, t3 time.Duration) {
	for span, d := range map[string]time.Duration{"t1": t1, "t2": t2, "t3": t3} {
		if d > 0 {
			m.incidents.WithLabelValues(bot, kind, span).Observe(d.Seconds())
		}
	}
}

// FrameIn counts a callback read (wecom.FrameObserver).
func (m *Node) FrameIn(bot, cmd string) { m.framesIn.WithLabelValues(bot, cmd).Inc() }

// FrameOut counts a frame sent with its ack's errcode (wecom.FrameObserver).
func (m *Node) FrameOut(bot, cmd string, errcode int) {
	m.framesOut.WithLabelValues(bot, cmd, strconv.Itoa(errcode)).Inc()
}

// Receipted observes a receipt's latency (access.Config.Receipted).
func (m *Node) Receipted(bot string, d time.Duration) {
	m.receipt.WithLabelValues(bot).Observe(d.Seconds())
}

// Stage observes one step on a message's way to its receipt
// (access.Config.Stage).
func (m *Node) Stage(bot, stage string, d time.Duration) {
	m.stages.WithLabelValues(bot, stage).Observe(d.Seconds())
}

// Feedback counts a user's verdict on an answer (access.Metrics).
func (m *Node) Feedback(bot, kind string) { m.feedback.WithLabelValues(bot, kind).Inc() }

// PushLag observes a progress frame's lag (pusher.Metrics).
func (m *Node) PushLag(bot string, d time.Duration) {
	m.pushLag.WithLabelValues(bot).Observe(d.Seconds())
}

// TermStarted counts a term of bot this node leads.
func (m *Node) TermStarted(bot string) { m.terms.WithLabelValues(bot).Inc() }

// EtcdError counts a failed etcd request of op.
func (m *Node) EtcdError(op string) { m.etcdErrors.WithLabelValues(op).Inc() }

// NATSError counts a NATS error of kind; op names the request of a
// kind "request" ("": an error of the connection, not of one request).
func (m *Node) NATSError(kind, op string) { m.natsErrors.WithLabelValues(kind, op).Inc() }

// CorruptRecord counts a task record of bot skipped at where because it
// does not decode.
func (m *Node) CorruptRecord(bot, where string) { m.corrupt.WithLabelValues(bot, where).Inc() }

// Handler serves the registry in Prometheus's text format.
func (m *Node) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry, Timeout: 10 * time.Second})
}
