package health

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/heal/incident"
)

// Incident bookkeeping: opening the bot's incident (or finding the open
// one), each later step under the incident store's compare-and-set, and
// the close once the bot is online and its data complete, with T1, T2 and
// T3 logged and noted.

// open opens inc (owner and node filled in), or returns the bot's open
// incident of that kind. nil: the store failed (logged).
func (h *Health) open(ctx context.Context, bd *binding, inc incident.Incident) *incident.Incident {
	if inc.Owner == "" {
		inc.Owner = h.cfg.Owners[inc.Bot]
	}
	inc.Node = h.cfg.NodeID
	if inc.Next == "" {
		inc.Next = nextAction(inc.Signal, inc.Bot)
	}
	if inc.Dropped.After(inc.Detected) {
		inc.Dropped = inc.Detected
	}
	if len(inc.Events) == 0 {
		inc.Note(inc.Detected, h.cfg.NodeID, "detected (%s): %s", inc.Signal, inc.Reason)
	}
	cur, err := bd.incidents.Open(ctx, inc)
	switch {
	case err == nil:
		h.log.Warn().Str("bot", inc.Bot).Str("incident", cur.ID).Str("signal", inc.Signal).Str("level", string(inc.Level)).
			Dur("t1", cur.T1()).Str("reason", inc.Reason).Msg("incident opened")
		return cur
	case errors.Is(err, incident.ErrOpen):
		return cur
	default:
		h.log.Error().Err(err).Str("bot", inc.Bot).Msg("incident not recorded")
		return nil
	}
}

func (h *Health) updateIncident(ctx context.Context, bd *binding, inc *incident.Incident, fn func(*incident.Incident)) *incident.Incident {
	return h.updateIncidentID(ctx, bd, inc.Bot, inc.ID, fn)
}

func (h *Health) updateIncidentID(ctx context.Context, bd *binding, bot, id string, fn func(*incident.Incident)) *incident.Incident {
	cur, err := bd.incidents.Update(ctx, bot, id, func(i *incident.Incident) error {
		if i.State == incident.Closed {
			return errClosed
		}
		fn(i)
		return nil
	})
	if err != nil && !errors.Is(err, errClosed) {
		h.log.Warn().Err(err).Str("bot", bot).Str("incident", id).Msg("incident not updated")
		return nil
	}
	if err == nil && cur.State == incident.Closed {
		h.log.Info().Str("bot", bot).Str("incident", id).Str("method", string(cur.Method)).
			Dur("t1", cur.T1()).Dur("t2", cur.T2()).Dur("t3", cur.T3()).Dur("downtime", cur.Downtime(cur.Closed)).Msg("incident closed")
		if h.cfg.Metrics != nil {
			h.cfg.Metrics.IncidentClosed(bot, string(cur.Kind), cur.T1(), cur.T2(), cur.T3())
		}
	}
	return cur
}

var errClosed = errors.New("incident closed")

// maybeClose closes i once it is online and its data complete.
func (h *Health) maybeClose(i *incident.Incident, now time.Time) {
	if i.State != incident.Closed && !i.Online.IsZero() && !i.DataComplete.IsZero() {
		i.Close(now)
		i.Note(now, h.cfg.NodeID, "closed (%s): T1 %s, T2 %s, T3 %s, down %s", i.Method,
			i.T1().Round(time.Millisecond), i.T2().Round(time.Millisecond), i.T3().Round(time.Millisecond), i.Downtime(now).Round(time.Millisecond))
	}
}

// nextAction is what to do about an incident found by signal.
func nextAction(signal, bot string) string {
	switch signal {
	case incident.SignalAuth:
		return fmt.Sprintf("fix the secret of bot %s, restart the nodes, then `botctl incidents ack <id>`", bot)
	case incident.SignalDelivery:
		return "tell the user their answer could not be delivered (see `botctl tasks show`); `botctl tasks redeliver <task>` once the cause is fixed; then `botctl incidents ack <id>`"
	case incident.SignalBackfill:
		return "the listed conversations may have unanswered messages: check them in WeCom, raise backfill.max_messages if the budget was the limit, then `botctl incidents ack <id>`"
	case incident.SignalGate:
		return "another environment uses this bot's credentials: stop it or give it its own bot, then `botctl incidents ack <id>`"
	}
	return "none yet: botctl is reconnecting; if this stays open past the escalation limit, check the node logs, egress to WeCom, and `botctl status`"
}
