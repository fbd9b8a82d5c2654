package health

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/botctl/botctl/internal/oneline"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/redact"
)

// AIDown opens bot's AI incident: every backend of its chain failed on
// this node until its circuit breaker opened (down: each backend's last
// failure), so its questions get a failure, not an answer. A node that
// finds the incident open already notes that it sees the same.
func (h *Health) AIDown(bot string, down map[string]string) {
	b := h.bot(bot)
	now := h.now()
	names := slices.Sorted(maps.Keys(down))
	var parts []string
	for _, n := range names {
		parts = append(parts, n+": "+oneline.Clip(redact.String(down[n]), 300))
	}
	reason := fmt.Sprintf("every AI backend of the bot is failing (circuit breakers open on node %s): %s", h.cfg.NodeID, strings.Join(parts, "; "))
	h.post(b, func(ctx context.Context) {
		bd := h.binding()
		if bd == nil {
			return
		}
		inc := h.open(ctx, bd, incident.Incident{Bot: bot, Kind: incident.AI, Level: incident.Human, Signal: incident.SignalAIDown,
			Reason: reason,
			Next: "check the backends named (the provider's status, the network to it, its key; the node log has each failure); " +
				"botctl retries each after ai.breaker.cooldown and closes this incident when one answers; " +
				"a backend to add meanwhile: ai.fallback (botctl bots set)",
			Dropped: now, Detected: now})
		if inc != nil && !inc.Detected.Equal(now) {
			h.updateIncident(ctx, bd, inc, func(i *incident.Incident) { i.Note(now, h.cfg.NodeID, "every AI backend failing here too: %s", reason) })
		}
	})
}

// AIUp closes bot's AI incident, if one is open: backend answered again
// on this node.
func (h *Health) AIUp(bot, backend string) {
	b := h.bot(bot)
	now := h.now()
	h.post(b, func(ctx context.Context) {
		bd := h.binding()
		if bd == nil {
			return
		}
		inc, err := bd.incidents.OpenFor(ctx, bot, incident.AI)
		if err != nil || inc == nil {
			if err != nil {
				h.log.Warn().Err(err).Str("bot", bot).Msg("AI incident not closed: not read")
			}
			return
		}
		h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
			i.Acted(now, "auto: circuit breaker probe")
			i.Recovered, i.Online, i.DataComplete = now, now, now
			i.Close(now)
			i.Note(now, h.cfg.NodeID, "closed (%s): %s answered again, down %s", i.Method, backend, i.Downtime(now).Round(time.Millisecond))
		})
	})
}
