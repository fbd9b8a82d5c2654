package serve

import (
	"github.com/botctl/botctl/pkg/metrics"
	"github.com/botctl/botctl/pkg/worker"
)

// Answered observes one call of a bot's backend (worker.ModelMetrics):
// the botctl_ai_* metrics and GET /status's "model" summary.
func (o *observer) Answered(bot, backend string, c worker.Call) {
	o.metrics.Answered(bot, backend, metrics.Call{FirstToken: c.FirstToken, Duration: c.Duration, ErrKind: c.ErrKind,
		TokensIn: c.Usage.In, TokensOut: c.Usage.Out})
}

var _ worker.ModelMetrics = (*observer)(nil)
