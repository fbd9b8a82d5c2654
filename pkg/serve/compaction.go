package serve

import (
	"context"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/compaction"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdHistory reads whether etcd compacts its history (pkg/compaction)
// for /readyz's warnings and /metrics, at most once every historyTTL, and
// logs the warning when it first appears.
type etcdHistory struct {
	cli *clientv3.Client
	log zerolog.Logger

	mu   sync.Mutex
	h    compaction.History
	err  error
	at   time.Time
	warn string // the last warning logged
}

// historyTTL bounds how often the history is read (about 30 small reads).
const historyTTL = time.Minute

var (
	descUncompacted = desc("etcd_revisions_uncompacted", "Revisions etcd keeps in its history (current minus compact revision); grows without bound when the cluster has no auto-compaction.")
	descCompactWarn = desc("etcd_compaction_warning", "1 when etcd's history shows no auto-compaction (see /readyz warnings and docs/operations.md), else 0.")
)

// get is the cached history, read again once older than historyTTL.
func (e *etcdHistory) get(ctx context.Context) (compaction.History, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.at.IsZero() && time.Since(e.at) < historyTTL {
		return e.h, e.err
	}
	e.h, e.err = compaction.Read(ctx, e.cli)
	e.at = time.Now()
	if w := e.h.Warning(); e.err == nil && w != e.warn {
		e.warn = w
		if w != "" {
			e.log.Warn().Int64("revision", e.h.Revision).Int64("compacted", e.h.Compacted).Msg(w)
		}
	}
	return e.h, e.err
}

// warning is the current compaction warning, "" if none or unknown.
func (e *etcdHistory) warning(ctx context.Context) string {
	h, err := e.get(ctx)
	if err != nil {
		return ""
	}
	return h.Warning()
}

// Describe implements prometheus.Collector.
func (e *etcdHistory) Describe(ch chan<- *prometheus.Desc) {
	ch <- descUncompacted
	ch <- descCompactWarn
}

// Collect implements prometheus.Collector; nothing when etcd cannot be read.
func (e *etcdHistory) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if e.cli == nil {
		return // a test's node without etcd
	}
	h, err := e.get(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descUncompacted, prometheus.GaugeValue, float64(h.Uncompacted()))
	ch <- prometheus.MustNewConstMetric(descCompactWarn, prometheus.GaugeValue, b2f(h.Warning() != ""))
}
