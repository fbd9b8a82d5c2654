package health

import (
	"context"
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/wecom"
)

// Route silence: one route of a bot (a group) silent for longer than its
// own baseline allows while the bot's other chats still deliver. The
// decision is watch.routeSilence and judgedRoute (decide.go); here are its
// effects: one resubscribe on a fresh connection, then a page.

// judgeRoute judges the route silence sp seen at now and acts on it: true
// when it closed conn (the monitor ends; the node resubscribes).
func (h *Health) judgeRoute(ctx context.Context, b *botState, bd *binding, conn *wecom.Conn, w *watch, sp suspicion, now time.Time) bool {
	since, until := sp.missedSpan(now)
	n, herr := h.missed(ctx, b.id, since, until)
	verdict, why := judgeRouteSilence(n, herr)
	j := w.judgedRoute(now, sp, verdict, why, verdict == deaf && h.routeActed(ctx, b, sp.route))
	switch {
	case j.close != nil:
		h.closeSick(b, conn, *j.close)
		return true
	case j.page != "":
		h.post(b, func(ctx context.Context) { h.pageRoute(ctx, b, sp.route, j.page, now) })
	case j.unjudged:
		h.log.Warn().Str("bot", b.id).Str("route", sp.route).Str("reason", sp.reason+"; "+why).Msg("route silence not judged")
	case j.note != "":
		h.log.Info().Str("bot", b.id).Str("route", sp.route).Str("baseline_note", j.note).Msg("route silence alarm refuted")
		h.writeRecord(b, bd, nil, now, func(r *Record) { r.BaselineNote = j.note })
	}
	return false
}

// routeActed reports whether b's open incident is route's silence,
// already acted on (resubscribed once): another resubscribe would not help.
func (h *Health) routeActed(ctx context.Context, b *botState, route string) bool {
	bd := h.binding()
	if bd == nil {
		return false
	}
	inc, err := bd.incidents.OpenFor(ctx, b.id, incident.Outage)
	return err == nil && inc != nil && inc.Signal == incident.SignalRouteSilence && inc.Route == route && inc.Recovered.IsZero()
}

// pageRoute makes b's open route silence incident need a person: a fresh
// connection did not bring route back. It stays open until the route's
// callbacks arrive again.
func (h *Health) pageRoute(ctx context.Context, b *botState, route, why string, now time.Time) {
	bd := h.binding()
	if bd == nil {
		return
	}
	inc, err := bd.incidents.OpenFor(ctx, b.id, incident.Outage)
	if err != nil || inc == nil || inc.Signal != incident.SignalRouteSilence || inc.Route != route || inc.Level == incident.Human {
		return
	}
	h.log.Warn().Str("bot", b.id).Str("route", route).Str("reason", why).Msg("route still silent after a resubscribe: paging")
	next := routeNext(b.id, route)
	inc = h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
		i.Level, i.Next = incident.Human, next
		i.Note(now, h.cfg.NodeID, "%s: a person is needed", why)
	})
	if inc != nil {
		h.setRecord(ctx, bd, b.id, now, func(r *Record) {
			r.State, r.Reason = NeedsHuman, fmt.Sprintf("%s gets no callbacks although the bot's other chats do, and a fresh connection did not help", route)
		})
	}
}

// routeNext is the next action of a route silence that paged.
func routeNext(bot, route string) string {
	return fmt.Sprintf("WeCom no longer delivers %s's callbacks to bot %s although its other chats still arrive, and a fresh connection did not help: "+
		"check in WeCom that the bot is still a member of that group and that a message there mentioning it reaches it; if not, ask WeCom support. "+
		"The incident closes by itself when the group's callbacks arrive again; `botctl incidents ack <id>` to say someone is on it", route, bot)
}
