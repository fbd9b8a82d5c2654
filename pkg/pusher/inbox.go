package pusher

// The inbox: the one way into the active set. Every source that tells the
// pusher of a task (the package doc says which, and what each covers)
// puts an arrival; put is the only code that adds a task to the active
// set, and what each source's news changes in the task's entry is decided
// there, in one switch.

import (
	"context"
	"errors"
	"time"

	"github.com/botctl/botctl/pkg/schema"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// source is how a task reached the pusher.
type source int

const (
	// fromInbound: this node's inbound path dispatched the task (Notify,
	// NotifyChat), or the caller wrote its record.
	fromInbound source = iota
	// fromNotice: the task's record changed where the pusher must act at
	// once (Names.NoticeSubject): an execution ended, a delivery reopened.
	fromNotice
	// fromWatch: a worker wrote the task's output (the output watch).
	fromWatch
	// fromResync: the undelivered index names the task (resync).
	fromResync
	// fromRebuild: the undelivered index named it at the term's start
	// (rebuild).
	fromRebuild
)

// arrival is one task reaching the pusher, with what its source knows.
type arrival struct {
	id   string
	from source
	chat string       // the task's conversation ("": not known)
	rec  *task.Record // fromNotice: the record as written at rev (nil: the step reads it)
	rev  uint64       // fromNotice: rec's revision; fromWatch: out's revision in the output bucket
	out  *task.Output // fromWatch: the output written
}

// inbox wakes the scan when tasks arrive.
type inbox struct {
	// wake: something arrived; the scan runs soon (minScanGap coalesces).
	wake chan struct{}
	// announced: a notice arrived; it interrupts a scan waiting for step
	// slots (scan), so an ending does not wait behind a long round.
	announced chan struct{}
	// rewatch: the NATS connection came back (reconnect.go); the output
	// watch is made again.
	rewatch chan struct{}
	// waited: a step's wait ends before the scan's sleep (due.go).
	waited chan struct{}
}

func newInbox() inbox {
	return inbox{wake: make(chan struct{}, 1), announced: make(chan struct{}, 1), rewatch: make(chan struct{}, 1), waited: make(chan struct{}, 1)}
}

func ring(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// put admits a: it adds the task to the active set if it is not there,
// merges what a's source knows into its entry, and wakes the scan. It
// reports whether the entry changed (a resync of a task already active
// changes nothing). Applied at once, under mu, not queued for the scan:
// the inbound path's announcement makes Idle false before it returns, and
// the watch's revision and the task's entry change together, so the
// watermark never passes an output event whose task is not in the set.
func (p *Pusher) put(a arrival) bool {
	p.mu.Lock()
	now := p.cfg.Now()
	en := p.active[a.id]
	if en == nil && a.from == fromResync && p.doneInResync[a.id] {
		p.mu.Unlock()
		return false // its delivery ended as the resync read: not lost, not back
	}
	added := en == nil
	if added {
		en = &entry{shownAt: now}
		p.active[a.id] = en
	}
	switch a.from {
	case fromInbound, fromRebuild:
		if !added {
			en.rec = nil // the caller wrote it: the next step reads
		}
	case fromResync:
		if !added {
			p.mu.Unlock()
			return false // known already: its steps read its record
		}
	case fromNotice:
		// The cached record is forgotten (the step reads it), but for the
		// common ending: a notice that carries the record (task.NoticeOf)
		// of a task this pusher is streaming as running, at a revision
		// past the cached one, replaces it, and the final frame needs no
		// read. Only then: the cache of a running task changes only by
		// this pusher's progress writes, which it keeps with their
		// revisions, so a newer revision is newer than everything it
		// knows; a notice that comes late (after the delivery, or after
		// another write of this pusher) never brings an older record back.
		if a.rec != nil && en.rec != nil && en.rec.Exec == task.Running && a.rev > en.rev {
			p.adopt(en, a.rec, a.rev)
		} else {
			en.rec = nil
		}
		en.notBefore = time.Time{} // the ending waits for no progress pacing
		en.poked = en.inflight     // nor for the wait of a step that began before it
		en.urgent = true
	case fromWatch:
		p.lastRev = max(p.lastRev, a.rev)
		if en.firstRev == 0 {
			en.firstRev = a.rev
		}
		en.out, en.outAt, en.outFinal = a.out, now, false
		en.outHash, en.view, en.viewHash = p.hashes(a.out)
		if en.flushing {
			// The version a step asked for (flush.go), or one as fresh:
			// the frame goes now, not after its wait.
			en.flushing, en.notBefore = false, time.Time{}
			en.poked = en.poked || en.inflight
		}
	}
	p.named(en, a.chat)
	p.touch(a.id, en)
	p.mu.Unlock()
	ring(p.in.wake)
	if a.from == fromNotice {
		ring(p.in.announced)
	}
	return true
}

// The producers (the output watch is in watch.go).

// Notify adds a task (just dispatched by the inbound path) to the active set.
func (p *Pusher) Notify(taskID string) { p.NotifyChat(taskID, "") }

// NotifyChat is Notify for a task of conversation chat ("": not known),
// which Idle then counts busy until the task is delivered.
func (p *Pusher) NotifyChat(taskID, chat string) {
	p.put(arrival{id: taskID, from: fromInbound, chat: chat})
}

// noticed learns from a notice (task.NoticeOf) that task id's record
// changed, so that the next scan steps it at once; rec, at revision rev,
// is the record as written when the notice carries it (put decides what
// it replaces).
func (p *Pusher) noticed(id string, rec *task.Record, rev uint64) {
	a := arrival{id: id, from: fromNotice, rec: rec, rev: rev}
	if rec != nil {
		a.chat = rec.Chat
	}
	p.put(a)
}

// rebuild finds every task of the bot not yet delivered: after a failover
// the first scan finds them all.
func (p *Pusher) rebuild(ctx context.Context) error {
	// The undelivered index names the bot's tasks not yet delivered; their records
	// say where each one is. Reading every record would also work, but
	// costs a read per task kept in the bucket (days of them).
	ids, err := p.store.UndeliveredTasks(ctx, p.cfg.Bot)
	if err != nil {
		p.storeError("record_read", err)
		return err
	}
	n := 0
	for _, id := range ids {
		r, _, err := task.Get(ctx, p.store.Tasks(), id)
		if errors.Is(err, natsjs.ErrKeyNotFound) {
			p.cfg.Lifecycle.Forget(ctx, p.cfg.Bot, id) // expired with its record
			continue
		}
		if errors.Is(err, schema.ErrNewer) {
			// A newer botctl's task, left in the index for a leader of
			// that version; the bot's other tasks do not wait for it.
			p.log.Warn().Err(err).Str("task", id).Msg("task left for a leader of a newer botctl")
			continue
		}
		if errors.Is(err, task.ErrCorruptRecord) {
			// No read will ever succeed: skipped (and reported), not
			// retried, or the bot's every other task would wait behind it.
			// It stays in the index: a person may put a record back.
			p.cfg.Lifecycle.Corrupt(p.cfg.Bot, id, task.CorruptAtRebuild, err)
			continue
		}
		if err != nil {
			p.storeError("record_read", err)
			return err
		}
		if r.Delivery.Finished() {
			p.cfg.Lifecycle.Forget(ctx, p.cfg.Bot, id)
			continue
		}
		// What the previous leader sent in the quota's window counts here.
		p.cfg.Budget.Seed(r.Chat, p.assumedSends(r))
		if r.FinalPending {
			p.count(func(s *Stats) { s.Ambiguous++ })
			p.log.Warn().Str("task", r.ID).Msg("final frame sent but not recorded by the previous leader: delivering again (the user may see it twice)")
		}
		p.put(arrival{id: r.ID, from: fromRebuild, chat: r.Chat})
		n++
	}
	p.chats.rebuilt.Store(true)
	p.count(func(s *Stats) { s.RebuiltNum = n })
	if n > 0 {
		p.log.Info().Int("tasks", n).Msg("active tasks found at term start")
	}
	return nil
}

// resync adds to the active set every task the undelivered index names that
// it lacks: one whose only announcement was lost (a core NATS notice sent
// while the connection was reconnecting, a refusal recorded with no output
// to watch). Without it such a task waited for the next term's rebuild:
// the user got nothing meanwhile. Records are read by the steps, not here.
//
// A task whose delivery ends while the index is read (it leaves the index,
// then the active set) may still be in what the read returns: it is not
// put back. Before, it was, and counted resynced (never announced) though
// it was just delivered, and stepped once more for nothing; at scale,
// with deliveries ending all the time, every resync miscounted some. (A
// task dropped then for another reason, no record or a corrupt one, stays
// in the index: the next resync finds it.)
func (p *Pusher) resync(ctx context.Context) {
	p.mu.Lock()
	p.doneInResync = map[string]bool{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.doneInResync = nil
		p.mu.Unlock()
	}()
	ids, err := p.store.UndeliveredTasks(ctx, p.cfg.Bot)
	if err != nil {
		p.storeError("record_read", err)
		return
	}
	n := 0
	for _, id := range ids {
		if p.put(arrival{id: id, from: fromResync}) {
			n++
		}
	}
	if n > 0 {
		p.count(func(s *Stats) { s.Resynced += int64(n) })
		p.log.Info().Int("tasks", n).Msg("undelivered tasks found by the resync (their announcement was lost)")
	}
}

// ResyncEvery is how often the pusher reads the undelivered index for tasks
// it was never told of.
const ResyncEvery = time.Minute
