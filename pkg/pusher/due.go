package pusher

// Which tasks a scan looks at. Walking the whole active set at every
// wake (up to 20 a second: the output watch delivers thousands of writes
// a second at scale) cost the leader 14-17 % of its CPU at 2,000 and
// 10,000 conversations (needsStep for every quiet task, under mu;
// bench/ramp-cost-final.md's profiles). A scan now looks at
//
//   - the tasks whose entry changed since the last scan (touched: put,
//     for every source; release, for a step that ended without a wait;
//     a scan interrupted before their step);
//   - the tasks whose wait has passed (a step's wait, notBefore: the
//     waits heap, whose earliest deadline also wakes the scan);
//   - every task once per ScanInterval (the tick), and after a reconnect:
//     what only time changes, with no event (the record's refresh, a
//     heartbeat, the window closing, watchFresh's end), is found within
//     ScanInterval, as before.
//
// A look the scan skips is never a task left behind: every change of
// what needsStep reads either touches the entry or is time, which the
// tick's whole walk covers.

import (
	"container/heap"
	"time"
)

// due is what the next scan looks at. Guarded by Pusher.mu.
type due struct {
	touched []string  // entries changed since the last scan, each once (entry.touched)
	waits   waitHeap  // steps' waits (notBefore), earliest first
	all     bool      // the next scan looks at every task (a reconnect)
	armed   time.Time // when the scan's sleep ends (untilWait; zero: not known)
	looks   int64     // tasks looked at (needsStep asked): what the scans cost (a test reads it)
}

// wait is one step's wait: task id is not stepped before at.
type wait struct {
	at time.Time
	id string
}

type waitHeap []wait

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h waitHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *waitHeap) Push(x any)        { *h = append(*h, x.(wait)) }
func (h *waitHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	return w
}

// touch has the next scan look at en (task id). The caller holds mu.
func (p *Pusher) touch(id string, en *entry) {
	if !en.touched {
		en.touched = true
		p.due.touched = append(p.due.touched, id)
	}
}

// waitUntil has a scan look at task id once at has passed; a wait that
// ends before the scan's sleep does shortens the sleep (a step's wait is
// set after the scan that began it has gone to sleep). The caller holds
// mu.
func (p *Pusher) waitUntil(id string, at time.Time) {
	heap.Push(&p.due.waits, wait{at: at, id: id})
	if p.due.armed.IsZero() || at.Before(p.due.armed) {
		ring(p.in.waited)
	}
}

// nextWait is the earliest wait's end (ok false: none). The caller holds
// mu.
func (p *Pusher) nextWait() (at time.Time, ok bool) {
	if len(p.due.waits) == 0 {
		return time.Time{}, false
	}
	return p.due.waits[0].at, true
}

// looks calls look on the entries a scan at now looks at: every one when
// all (or after a reconnect), else those touched and those whose wait has
// passed. An entry may be looked at twice (touched and waited); look's
// own checks (inflight) make the second a no-op. The caller holds mu.
func (p *Pusher) looks(now time.Time, all bool, look func(id string, en *entry)) {
	all = all || p.due.all
	touched := p.due.touched
	p.due.touched, p.due.all = nil, false
	for len(p.due.waits) > 0 && !p.due.waits[0].at.After(now) {
		w := heap.Pop(&p.due.waits).(wait)
		if en := p.active[w.id]; en != nil && !all {
			p.due.looks++
			look(w.id, en)
		}
	}
	if all {
		for id, en := range p.active {
			en.touched = false
			p.due.looks++
			look(id, en)
		}
		return
	}
	for _, id := range touched {
		if en := p.active[id]; en != nil && en.touched {
			en.touched = false
			p.due.looks++
			look(id, en)
		}
	}
}
