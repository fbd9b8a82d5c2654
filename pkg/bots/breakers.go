package bots

import (
	"sync/atomic"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/heal/health"
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
