package worker

import (
	"context"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/limits"
	"github.com/botctl/botctl/pkg/task"
)

// ModelMetrics hears how each call of a bot's backend went. Optional: a
// Config.Metrics that has this method hears it (pkg/serve's observer:
// the botctl_ai_* metrics). It must not block.
type ModelMetrics interface {
	Answered(bot, backend string, c Call)
}

// Call is one call of a backend (one attempt of a task), as it ended.
type Call struct {
	// FirstToken is from the request to the answer's first text (0: no
	// text came).
	FirstToken time.Duration
	// Duration is from the request to the call's end.
	Duration time.Duration
	// ErrKind is the failure's class (ai.ErrorClass; "": answered, or
	// the call was stopped: a /stop, a takeover, the node stopping).
	ErrKind string
	// Usage is what the backend reported (Reported false: nothing, which
	// is not zero tokens).
	Usage    ai.Usage
	Reported bool
}

// stream asks run's backend for m's answer, emitting into emit, and
// reports the call: its metrics (ModelMetrics), the usage the backend
// reported to the task's record (Lifecycle.AddUsage) and, when the bot
// has a token limit, to its counters (limits.Counters.AddTokens).
//
// The call is labelled with the backend whose step ended it (route's last:
// the one that answered, or failed last), not the chain's name, so a bot
// with fallbacks has one series per backend; a primary that failed before
// the fallback answered is counted in botctl_ai_fallbacks_total.
func (w *Worker) stream(ctx context.Context, m task.Message, attempt int, run BotRun, req ai.Request, route *ai.Route, emit func(string) error) error {
	uctx, used := ai.WithUsage(ctx)
	start := time.Now()
	var first time.Duration
	err := run.Backend.Stream(uctx, req, func(d string) error {
		if first == 0 {
			first = max(time.Since(start), time.Nanosecond)
		}
		return emit(d)
	})
	c := Call{FirstToken: first, Duration: time.Since(start), ErrKind: ai.ErrorClass(err)}
	if ctx.Err() != nil { // stopped, not failed
		c.ErrKind = ""
	}
	c.Usage, c.Reported = used()
	if mm, ok := w.cfg.Metrics.(ModelMetrics); ok {
		name := run.Backend.Name()
		if steps := route.Steps(); len(steps) > 0 {
			name = steps[len(steps)-1].Backend
		}
		mm.Answered(m.Bot, name, c)
	}
	if c.Reported && c.Usage.Total() > 0 {
		w.recordUsage(context.WithoutCancel(ctx), m, attempt, run.Limits, c.Usage)
	}
	return err
}

// recordUsage writes u to the task's record and the bot's token counts.
// A failure is logged: the answer stands.
func (w *Worker) recordUsage(ctx context.Context, m task.Message, attempt int, l limits.Limits, u ai.Usage) {
	log := w.log.With().Str("task", m.TaskID).Str("bot", m.Bot).Logger()
	rctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	if err := w.cfg.Lifecycle.AddUsage(rctx, m.TaskID, attempt, task.Usage{In: u.In, Out: u.Out}); err != nil {
		w.storeError("record_write", err)
		log.Debug().Err(err).Msg("usage not recorded in the task's record")
	}
	if !l.Tokens() || w.buckets == nil {
		return
	}
	if err := limits.New(w.buckets.Limits(), w.cfg.Now).AddTokens(rctx, m.Bot, m.User, u.Total(), l); err != nil {
		log.Warn().Err(err).Msg("tokens not counted in the bot's limits")
	}
}
