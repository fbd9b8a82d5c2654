package serve

import (
	"github.com/botctl/botctl/pkg/bots"

	"github.com/prometheus/client_golang/prometheus"
)

// The metrics of the breakers, read at scrape time.
var (
	descBreaker  = desc("ai_breaker_state", "Each AI backend's circuit breaker on this node, per bot: 0 closed, 1 half-open (one answer probes it), 2 open (skipped).", "bot", "backend")
	descAIFalls  = desc("ai_fallbacks_total", "Answers that left an AI backend for the next (to=\"none\": it was the last), because it failed before its first token or its breaker was open.", "bot", "from", "to")
	descAICuts   = desc("ai_answers_cut_total", "Answers ended with a note because their AI backend failed after its first token.", "bot", "backend")
	breakerDescs = []*prometheus.Desc{descBreaker, descAIFalls, descAICuts}
)

// breakerCollector exposes the breakers of b (none before they exist).
type breakerCollector struct{ b *bots.Live }

func (c breakerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range breakerDescs {
		ch <- d
	}
}

func (c breakerCollector) Collect(ch chan<- prometheus.Metric) {
	if c.b == nil {
		return
	}
	views, falls, cuts := c.b.Breakers().Snapshot()
	for _, v := range views {
		ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, float64(v.State), v.Bot, v.Backend)
	}
	for _, f := range falls {
		ch <- prometheus.MustNewConstMetric(descAIFalls, prometheus.CounterValue, float64(f.N), f.Bot, f.From, f.To)
	}
	for _, k := range cuts {
		ch <- prometheus.MustNewConstMetric(descAICuts, prometheus.CounterValue, float64(k.N), k.Bot, k.Backend)
	}
}
