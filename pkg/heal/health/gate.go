package health

import (
	"context"
	"errors"

	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/heal/recovery"
	"github.com/botctl/botctl/pkg/wecom"
)

// The backlog gate: after an outage of at least Recovery.Threshold the bot
// is half-open on its new connection (probes, the backlog held, then
// drained below its normal rate) before it is online; its pusher waits on
// the gate meanwhile.

// Gate is bot's backlog gate, for its pusher.
func (h *Health) Gate(bot string) *recovery.Gate { return &h.bot(bot).gate }

// halfOpen runs the recovery of incident id on conn.
func (h *Health) halfOpen(ctx context.Context, bd *binding, b *botState, conn *wecom.Conn, id string) {
	note := func(s string) {
		h.updateIncidentID(ctx, bd, b.id, id, func(i *incident.Incident) { i.Note(h.now(), h.cfg.NodeID, "%s", s) })
	}
	b.mu.Lock()
	rate := 0.0
	if b.baseline != nil {
		rate = b.baseline.SendRate
	}
	b.mu.Unlock()
	rc := h.cfg.Recovery
	if rc.Clock == nil {
		rc.Clock = h.cfg.Clock
	}
	res, err := recovery.HalfOpen(ctx, rc, conn, &b.gate, rate, note)
	now := h.now()
	if errors.Is(err, recovery.ErrProbeFailed) {
		b.mu.Lock()
		b.cause = &closeCause{signal: incident.SignalProbe, reason: "half-open: " + err.Error(), dropped: now}
		b.mu.Unlock()
		conn.CloseUnhealthy(err)
		return
	}
	if err != nil || res.Online.IsZero() {
		return // the connection ended: its end is the next event
	}
	h.updateIncidentID(ctx, bd, b.id, id, func(i *incident.Incident) {
		i.Online = now
		h.maybeClose(i, now)
	})
	h.setRecord(ctx, bd, b.id, now, func(r *Record) {
		if r.State == HalfOpen {
			r.State, r.Reason = Online, ""
		}
	})
}
