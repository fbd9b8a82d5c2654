package pusher

// The active set: the tasks this term delivers, filled through the inbox
// (inbox.go) by the rebuild at start, the inbound path, notices, the
// output watch and the resync, and stepped by the scan when the cache
// says a step has something to do.

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botctl/botctl/pkg/tally"
	"github.com/botctl/botctl/pkg/task"
)

// entry is one task of the active set: what this pusher last saw of it.
type entry struct {
	out      *task.Output // latest output seen (nil: none yet)
	firstRev uint64       // output bucket revision of the first event seen for it (0: none)
	outHash  string       // task.Hash(out.Text), computed once per output version
	view     string       // view(out): what a progress frame shows (thinking.go), once per output version
	viewHash string       // task.Hash(view)
	outAt    time.Time    // when the watch delivered out (zero: out was read, not watched)
	outFinal bool         // out was read as a finished task's, from the output bucket (its attempt's last write)
	// runSeen is when a step first found attempt runAttempt running with
	// no output of it (waiting: the watch brings its first version).
	runAttempt int
	runSeen    time.Time
	rec        *task.Record // the record as a step last read or wrote it (nil: never, or forgotten)
	rev        uint64       // rec's revision
	readAt     time.Time    // when rec was read or written
	inflight   bool
	touched    bool      // in due.touched: the next scan looks at it (due.go)
	poked      bool      // a notice came while a step was in flight: the next step is not delayed
	urgent     bool      // a notice came since the last step: the next scan steps it first
	notBefore  time.Time // backoff
	shownAt    time.Time // when the user last saw something new, for heartbeats
	flushAt    time.Time // when a step last asked the worker for its text (flush.go)
	flushing   bool      // a step waits for the version it asked for: its arrival ends the wait
	chat       string    // the task's conversation ("" until a record or the inbound path names it)
	missing    time.Time // when a step first found no record (zero: it has one, or none looked)
	acked      ackedParts
	// unwritten: frames shown since the record last written (oldest
	// first, at most shownWriteEvery of them: ledger.shown); rec has them
	// applied. writtenAt is the PushedAt of the newest written record
	// this pusher knows.
	unwritten []task.Frame
	writtenAt time.Time
}

// ackedParts is how many parts of the answer pushed under one attempt and
// push round of a task this pusher saw acked (ledger.partPushed).
type ackedParts struct{ attempt, round, n int }

// ackedPart remembers that the first n parts of the answer pushed from r
// are acked.
func (p *Pusher) ackedPart(r *task.Record, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if en := p.active[r.ID]; en != nil {
		a := ackedParts{attempt: r.Attempt, round: r.PushRound, n: n}
		if en.acked.attempt == a.attempt && en.acked.round == a.round {
			a.n = max(a.n, en.acked.n)
		}
		en.acked = a
	}
}

// named records en's conversation in the chat index (Idle) the first time
// it is known. The caller holds mu.
func (p *Pusher) named(en *entry, chat string) {
	if en.chat != "" || chat == "" {
		return
	}
	en.chat = chat
	p.chats.Add(chat, 1)
}

// chatIndex counts the active tasks per conversation, for Idle. Its own
// lock, not the pusher's: Idle is asked on the inbound path, in the
// connection's callback order, and must not wait for a scan, which holds
// mu while it walks thousands of entries.
type chatIndex struct {
	tally.Tally
	// rebuilt: the term's rebuild found every task not yet delivered.
	rebuilt atomic.Bool
}

func (c *chatIndex) idle(chat string) bool { return c.rebuilt.Load() && c.Get(chat) == 0 }

// Idle reports whether this pusher knows that conversation chat has no
// task: it has found every task of the bot not yet delivered (the term's
// rebuild is done) and none of those it delivers now is chat's. A
// prediction, not the mutex: the work queue's publish decides, and a task
// announced only by the resync or the output watch is not named until
// its record is read (the inbound path keeps its own count of the
// messages it is handling, whose tasks are not announced yet).
func (p *Pusher) Idle(chat string) bool { return p.chats.idle(chat) }

// scan steps every task that needs a step, announced ones first. While
// it waits for a step slot, a notice interrupts it: the steps not yet
// begun are left for the next scan, which the caller runs at once (it
// reports true), so an ending announced meanwhile does not wait behind
// the rest of a long round. Only a notice: the output watch wakes the
// scan a thousand times a second at 10,000 conversations, and
// interrupting for each starved the progress frames (the first try sent
// a fifth of them).
//
// all: look at every task (the tick); otherwise only at those that
// changed or whose wait passed (due.go).
func (p *Pusher) scan(ctx context.Context, wg *sync.WaitGroup, sem chan struct{}, all bool) (interrupted bool) {
	now := p.cfg.Now()
	p.mu.Lock()
	// Announced changes (mostly endings: the final frame a user waits
	// for) go first; a round of thousands of progress and queued steps
	// would otherwise take the step slots before them.
	var due, rest []string
	p.looks(now, all, func(id string, en *entry) {
		if !en.inflight && !now.Before(en.notBefore) && p.needsStep(en, now) {
			en.inflight = true
			if en.urgent {
				due = append(due, id)
			} else {
				rest = append(rest, id)
			}
			en.urgent = false
		}
	})
	urgent := len(due)
	due = append(due, rest...)
	p.mu.Unlock()
	for i, id := range due {
		wake := p.in.announced
		if i < urgent {
			wake = nil // never interrupted before the announced ones
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			p.release(id, false, 0)
			continue
		case <-wake:
			for _, left := range due[i:] {
				p.release(left, false, 0)
			}
			return true
		}
		wg.Go(func() {
			defer func() { <-sem }()
			done, wait := p.step(ctx, id)
			p.release(id, done, wait)
		})
	}
	return false
}

// remember caches rec at revision rev as the task's record: read by a
// step, or written by one (a write's CAS succeeding proves nobody else
// wrote it since the revision it started from). Never an older revision
// than the one known: a notice may have brought a newer record while the
// step was writing.
func (p *Pusher) remember(id string, rec *task.Record, rev uint64) *task.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	if en := p.active[id]; en != nil && rev >= en.rev {
		rec = p.adopt(en, rec, rev)
		p.named(en, rec.Chat)
	}
	return rec
}

// adopt caches rec, as stored at rev (read, written, or carried by a
// notice), with the frames shown since that it lacks applied, and returns
// what it cached. The caller holds mu.
func (p *Pusher) adopt(en *entry, rec *task.Record, rev uint64) *task.Record {
	en.writtenAt = rec.PushedAt
	en.unwritten = slices.DeleteFunc(en.unwritten, func(f task.Frame) bool { return !f.At.After(rec.PushedAt) })
	if len(en.unwritten) > 0 {
		rec = p.cfg.Lifecycle.WithShown(rec, en.unwritten...)
	}
	en.rec, en.rev, en.readAt = rec, rev, p.cfg.Now()
	return rec
}

// frameShown notes frame f, shown from r (as stored at rev, with the
// frames not yet written applied), and says whether to write the record
// now, and with which frames. Not written: the cache holds r with f
// applied. Written: the first frame of a delivery (the record says the
// stream began), or shownWriteEvery after the last frame written, or when
// the cache has moved on from r (its write then starts afresh).
func (p *Pusher) frameShown(r *task.Record, rev uint64, f task.Frame) (frames []task.Frame, write bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	en := p.active[r.ID]
	if en == nil {
		return []task.Frame{f}, true
	}
	en.unwritten = append(en.unwritten, f)
	if r.Delivery != task.Pending && en.rec == r && en.rev == rev && f.At.Sub(en.writtenAt) < shownWriteEvery {
		en.rec = p.cfg.Lifecycle.WithShown(r, f)
		return nil, false
	}
	return slices.Clone(en.unwritten), true
}

// forget drops the task's cached record: the next step reads it.
func (p *Pusher) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if en := p.active[id]; en != nil {
		en.rec = nil
	}
}

// cached is the task's record and revision when the cache can stand in
// for a step's read (nil: read it). At 10,000 conversations the steps'
// reads were most of the JetStream API requests (42 per answer, against
// 18 output writes): every output version and every paced wait read the
// record, each a request to the R3 bucket's leader. The cache is trusted
// only while it is fresher than refreshEvery, and
//   - not queued: the start is not announced; a worker may have begun;
//   - not of another attempt than the output shows: it has moved on.
//
// Every other change that matters is announced: the notice replaces the
// cached record (the ending, task.Lifecycle.Finish) or clears it. A
// stale record costs no wrong write: every record write is a CAS from
// rev, and a lost CAS reads again; a final frame's intent that finds the
// delivery finished sends nothing.
func (p *Pusher) cached(id string) (*task.Record, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	en := p.active[id]
	if en == nil || en.rec == nil || en.rev == 0 || p.cfg.Now().Sub(en.readAt) >= refreshEvery {
		return nil, 0
	}
	if en.rec.Exec == task.Queued || (en.out != nil && en.out.Attempt != en.rec.Attempt) {
		return nil, 0
	}
	return en.rec, en.rev
}

// refreshEvery bounds how long a task goes without a fresh read of its
// record, whatever the cache says: a change whose notice was lost (core
// NATS, during a reconnect) and that wrote no output, or a start
// (queued → running: not announced, it only changes the status line).
// Every change that matters to the user is announced (task.Lifecycle's
// notices) and most also write output. Each read of an R3 bucket is a
// JetStream API request to its leader: at 10 s, 10,000 conversations
// (7,000 of them queued for a worker slot) cost 1,000 reads a second.
const refreshEvery = 30 * time.Second

// needsStep decides from what is cached (the record as last read, the
// output as last watched) whether a step could have anything to do, so
// that thousands of quiet tasks cost no bucket reads: rules.wants, the
// plan's own decisions (plan.go). The caller holds mu.
func (p *Pusher) needsStep(en *entry, now time.Time) bool {
	s := sight{rec: en.rec, shownAt: en.shownAt, handingOver: p.handingOver.Load()}
	if en.out != nil {
		s.view, s.viewHash = en.view, en.viewHash // as a progress frame shows it
	}
	return p.rules.wants(s, en.readAt, now)
}

// release ends a step: done drops the task from the active set; wait
// delays its next step.
func (p *Pusher) release(id string, done bool, wait time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	en := p.active[id]
	if en == nil {
		return
	}
	if done {
		delete(p.active, id)
		if p.doneInResync != nil {
			p.doneInResync[id] = true
		}
		if en.chat != "" {
			p.chats.Add(en.chat, -1)
		}
		return
	}
	en.inflight = false
	if en.poked {
		// A notice came during the step, which decided its wait
		// without it (a progress frame's step waits a scan interval):
		// the ending goes now, not a second later.
		en.poked, en.notBefore = false, time.Time{}
		p.touch(id, en)
		return
	}
	if wait > 0 {
		en.notBefore = p.cfg.Now().Add(wait)
		p.waitUntil(id, en.notBefore)
		return
	}
	p.touch(id, en)
}
