package pusher

// Flush requests: a progress frame about to show text from a version
// older than staleAfter first asks the node running the answer for its
// text now (core NATS, "<Names.FlushSubjectPrefix>.<node id>", the task
// id as payload: pkg/worker's flush.go), and waits up to flushWait for
// the watch to bring it. A frame held back by the conversation's send
// budget (a busy reply, a push, another answer's frames used it) would
// otherwise show the version that was latest when the hold began, up to
// a worker.output_interval old when it is finally sent; with the request
// it shows the worker's text of the moment. It is what lets workers write
// only about once per progress gap (serve's outputinterval.go).

import (
	"time"

	"github.com/botctl/botctl/pkg/task"
)

// staleAfter: a running answer's version this old when its frame is about
// to be sent is likely not the worker's latest text. The watch delivers a
// version within milliseconds, and a frame not held back is sent as its
// version arrives: one older than this waited, for the progress pacing or
// the conversation's budget, and the backend has likely streamed more
// since. A second is well above the watch's delay and well below the
// push lag target (3 s).
const staleAfter = time.Second

// flushWait is how long a frame waits for the fresher version it asked
// for; the version's arrival on the watch ends the wait at once (put). A
// worker that cannot answer (an older botctl, a fixed worker off NATS, a
// text unchanged since its last write) costs this wait, once per
// progress gap of a task at most (askFresh). A var for tests.
var flushWait = 300 * time.Millisecond

// askFresh asks r's worker for its text now, before a progress frame that
// would show a stale version (plan's actFlush), and reports whether it
// asked: the step then waits flushWait for the version, which its arrival
// ends (put). Not asked (the task left the set, the request not
// published): the frame goes now.
func (p *Pusher) askFresh(r *task.Record, now time.Time) (asked bool) {
	p.mu.Lock()
	en := p.active[r.ID]
	if en == nil {
		p.mu.Unlock()
		return false
	}
	en.flushAt, en.flushing = now, true
	p.stats.Flushes++
	p.mu.Unlock()
	subject := p.store.Names().FlushSubject(r.Node)
	if err := p.store.JetStream().Conn().Publish(subject, []byte(r.ID)); err != nil {
		p.log.Debug().Err(err).Str("task", r.ID).Msg("flush request not published; showing the text held")
		p.settled(r.ID)
		return false
	}
	return true
}

// settled notes that task id's next frame shows the version it has: a
// version asked for before is not awaited.
func (p *Pusher) settled(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if en := p.active[id]; en != nil {
		en.flushing = false
	}
}
