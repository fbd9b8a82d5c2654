package pusher

import (
	"context"
	"sort"
)

// Handover closes the streams this term still has open, before the node
// hands the bot over: WeCom binds a stream to the connection it began on,
// so the next leader cannot continue one and would leave it open in the
// chat, its answer arriving as a separate push. Each task of the active
// set whose stream began in this term is stepped once more: a running or
// queued one has its stream closed with the content so far and
// Config.HandoverNote, its delivery owed by push (truncated), which the
// next leader sends once the answer is complete; a finished one gets its
// final frame as usual.
//
// Call it once Run has returned, on a connection that is still open and
// a term that is still this node's (a graceful stop); it returns the
// number of streams it closed. It stops at ctx's end: a stream not
// reached, or whose conversation's budget has no room (the quota holds),
// stays open and its answer goes by push, as without Handover.
func (p *Pusher) Handover(ctx context.Context) int {
	p.handingOver.Store(true)
	before := p.Stats().Truncated
	p.mu.Lock()
	ids := make([]string, 0, len(p.active))
	for id, en := range p.active {
		if en.rec != nil && en.rec.TermRev != p.cfg.TermRev {
			continue // its stream began under another term: nothing to close here
		}
		ids = append(ids, id)
	}
	p.mu.Unlock()
	sort.Strings(ids)
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		done, wait := p.step(ctx, id)
		p.release(id, done, wait)
	}
	closed := int(p.Stats().Truncated - before)
	p.log.Info().Int("streams_closed", closed).Int("tasks", len(ids)).Msg("handover: open streams closed with the note; their answers follow by push")
	return closed
}
