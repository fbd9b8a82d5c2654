package pusher

import (
	"context"
	"sort"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/task"
)

// Handover closes the streams this term still has open, before the node
// hands the bot over: WeCom binds a stream to the connection it began on,
// so the next leader cannot continue one and would leave it open in the
// chat, its answer arriving as a separate push. Each task of the active
// set whose stream began in this term is stepped: a running or queued one
// has its stream closed with the content so far and Config.HandoverNote,
// its delivery owed by push (truncated), which the next leader sends once
// the answer is complete; a finished one gets its final frame as usual.
//
// It runs in passes until no stream of the term is open and inbound (nil:
// always false) says no callback of the term's connection is being
// handled, or until ctx ends. A pass takes the tasks that reached the
// active set meanwhile (a callback handled during the handover, whose
// receipt began a stream) and again each one whose step could not act yet
// (its conversation's budget has no room, its complete answer is written
// but its record not yet, a read failed), after the wait it asked for. A
// stream not closed when ctx ends stays open and its answer goes by push,
// as without Handover. The quota holds throughout.
//
// Call it once Run has returned, on a connection that is still open and
// a term that is still this node's (a graceful stop); it returns the
// number of streams it closed with the note.
func (p *Pusher) Handover(ctx context.Context, inbound func() bool) int {
	p.handingOver.Store(true)
	before := p.Stats().Truncated
	settled := map[string]bool{}
	var open []string
	for ctx.Err() == nil {
		open = p.handoverSet(settled)
		if len(open) == 0 && (inbound == nil || !inbound()) {
			break
		}
		next := handoverPoll
		for _, id := range open {
			if ctx.Err() != nil {
				break
			}
			done, wait := p.step(ctx, id)
			p.release(id, done, wait)
			if done || wait == 0 || !p.streamOpen(id) {
				settled[id] = true // finished, closed, or owed by push already
			} else {
				next = min(next, wait)
			}
		}
		// No watch runs any more (Run returned): what changed meanwhile
		// is read at the next step.
		p.unremember(open)
		pending := len(open) - countIn(open, settled)
		if p.handoverPass != nil {
			p.handoverPass.passed(pending)
		}
		if pending == 0 && len(p.handoverSet(settled)) == 0 && (inbound == nil || !inbound()) {
			break
		}
		if !clock.Sleep(ctx, p.cfg.Clock, next) {
			break
		}
	}
	left := len(open) - countIn(open, settled)
	closed := int(p.Stats().Truncated - before)
	p.log.Info().Int("streams_closed", closed).Int("tasks", len(settled)+left).Int("left_open", left).
		Msg("handover: open streams closed with the note or finished; the rest of the answers follow by push")
	return closed
}

// passObserver is told after each of Handover's passes how many tasks
// the next pass takes again (a test seam).
type passObserver interface{ passed(pending int) }

// handoverPoll is how often Handover looks for tasks the inbound path
// adds while it runs.
const handoverPoll = 50 * time.Millisecond

// handoverSet is the active tasks Handover steps next, in order: those of
// this term (or not read yet) that are not settled.
func (p *Pusher) handoverSet(settled map[string]bool) []string {
	p.mu.Lock()
	ids := make([]string, 0, len(p.active))
	for id, en := range p.active {
		if settled[id] || (en.rec != nil && en.rec.TermRev != p.cfg.TermRev) {
			continue // settled, or its stream began under another term: nothing to close here
		}
		ids = append(ids, id)
	}
	p.mu.Unlock()
	sort.Strings(ids)
	return ids
}

// streamOpen: task id's stream may still be open on this term's
// connection (its record, as last read, says so, or is not read).
func (p *Pusher) streamOpen(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	en := p.active[id]
	if en == nil {
		return false
	}
	r := en.rec
	return r == nil || (r.TermRev == p.cfg.TermRev && (r.Delivery == task.Pending || r.Delivery == task.Streaming))
}

// unremember forgets the cached record and output of tasks ids: their
// next step reads both.
func (p *Pusher) unremember(ids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		if en := p.active[id]; en != nil {
			en.readAt, en.outAt = time.Time{}, time.Time{}
		}
	}
}

func countIn(ids []string, set map[string]bool) int {
	n := 0
	for _, id := range ids {
		if set[id] {
			n++
		}
	}
	return n
}
