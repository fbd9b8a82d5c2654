package health

import (
	"context"
	"fmt"

	"github.com/botctl/botctl/pkg/heal/incident"
)

// CorruptRecord opens (or adds to) bot's data incident for task id, whose
// record does not decode (task.ErrCorruptRecord, err): every reader skips
// it (where: the one that told), so its user gets no answer from botctl
// until a person removes or replaces the value. Once per record for the
// whole cluster (incident.Store.Claim): the same record skipped again, by
// every resync, sweep and term until it is mended, adds nothing here (the
// node's metric counts each skip).
func (h *Health) CorruptRecord(bot, id, where string, err error) {
	b := h.bot(bot)
	now := h.now()
	h.post(b, func(ctx context.Context) {
		bd := h.binding()
		if bd == nil {
			return
		}
		claim := incident.SignalCorrupt + "/" + id
		first, cerr := bd.incidents.Claim(ctx, bot, claim)
		if cerr != nil {
			h.log.Warn().Err(cerr).Str("bot", bot).Str("task", id).Msg("corrupt record not recorded in an incident; the next skip tries again")
			return
		}
		if !first {
			return
		}
		bucket := bd.store.Tasks().Bucket()
		inc := h.open(ctx, bd, incident.Incident{Bot: bot, Kind: incident.Data, Level: incident.Human, Signal: incident.SignalCorrupt,
			Reason: fmt.Sprintf("the record of task %s does not decode; botctl skips it and its user got no answer from it: %v", id, err),
			Next: fmt.Sprintf("look at each task named in the timeline (`nats kv get %s <task>`), then remove its value (`nats kv del %s <task>`: "+
				"the sweep frees its conversation) or put a valid record back; tell its user if needed; then `botctl incidents ack <id>`", bucket, bucket),
			Dropped: now, Detected: now})
		noted := inc != nil && h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
			i.Note(now, h.cfg.NodeID, "task record does not decode, skipped (%s): task %s: %v", where, id, err)
		}) != nil
		if !noted {
			if rerr := bd.incidents.Release(ctx, bot, claim); rerr != nil {
				h.log.Warn().Err(rerr).Str("bot", bot).Str("task", id).Msg("corrupt record neither in an incident nor released; it is not reported again")
			}
		}
	})
}
