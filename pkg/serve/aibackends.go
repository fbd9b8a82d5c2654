package serve

import (
	"sync/atomic"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// breakerWatch hears this node's AI circuit breakers (ai.Breakers): it
// logs every change, and opens the bot's AI incident when all of its
// backends are open, closing it when one answers again (pkg/heal/health).
type breakerWatch struct {
	log    zerolog.Logger
	health atomic.Pointer[health.Health] // nil: logged only (a node that has not bound yet)
}

func (w *breakerWatch) BreakerChanged(bot, backend string, state ai.BreakerState, why string) {
	ev := w.log.Info()
	if state == ai.Open {
		ev = w.log.Warn()
	}
	ev.Str("bot", bot).Str("backend", backend).Str("state", state.String()).Str("why", why).Msg("AI circuit breaker " + state.String())
}

func (w *breakerWatch) AllDown(bot string, down map[string]string) {
	w.log.Error().Str("bot", bot).Int("backends", len(down)).Msg("every AI backend of the bot is failing: its questions get no answer until one recovers")
	if h := w.health.Load(); h != nil {
		h.AIDown(bot, down)
	}
}

func (w *breakerWatch) Recovered(bot, backend string) {
	w.log.Info().Str("bot", bot).Str("backend", backend).Msg("an AI backend of the bot answers again")
	if h := w.health.Load(); h != nil {
		h.AIUp(bot, backend)
	}
}

// The metrics of the breakers, read at scrape time.
var (
	descBreaker  = desc("ai_breaker_state", "Each AI backend's circuit breaker on this node, per bot: 0 closed, 1 half-open (one answer probes it), 2 open (skipped).", "bot", "backend")
	descAIFalls  = desc("ai_fallbacks_total", "Answers that left an AI backend for the next (to=\"none\": it was the last), because it failed before its first token or its breaker was open.", "bot", "from", "to")
	descAICuts   = desc("ai_answers_cut_total", "Answers ended with a note because their AI backend failed after its first token.", "bot", "backend")
	breakerDescs = []*prometheus.Desc{descBreaker, descAIFalls, descAICuts}
)

// breakerCollector exposes the breakers of b (none before they exist).
type breakerCollector struct{ b *bots }

func (c breakerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range breakerDescs {
		ch <- d
	}
}

func (c breakerCollector) Collect(ch chan<- prometheus.Metric) {
	if c.b == nil {
		return
	}
	views, falls, cuts := c.b.breakers.Snapshot()
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
