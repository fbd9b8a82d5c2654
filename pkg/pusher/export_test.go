package pusher

import "time"

// HoldWatch makes p's output watch wait for hold to close before its
// consumer is made (a watch made late); call it before Run.
func (p *Pusher) HoldWatch(hold <-chan struct{}) { p.watchHold = hold }

// SetUnknownRecordFor sets how long a task without a record is stepped
// (unknownRecordFor) until the test ends.
func SetUnknownRecordFor(t interface{ Cleanup(func()) }, d time.Duration) {
	old := unknownRecordFor
	unknownRecordFor = d
	t.Cleanup(func() { unknownRecordFor = old })
}

// HasRecord reports whether a step has read (or written) task id's record.
func (p *Pusher) HasRecord(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	en := p.active[id]
	return en != nil && en.rec != nil
}

// SetFlushWait sets how long a frame waits for the version it asked for
// (flushWait) until the test ends.
func SetFlushWait(t interface{ Cleanup(func()) }, d time.Duration) {
	old := flushWait
	flushWait = d
	t.Cleanup(func() { flushWait = old })
}

// Looks is how many tasks the scans looked at (due.go).
func (p *Pusher) Looks() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.due.looks
}

// OnHandoverPass calls f after each of Handover's passes with the number
// of tasks the next pass takes again; call it before Handover.
func (p *Pusher) OnHandoverPass(f func(pending int)) { p.handoverPass = passFunc(f) }

type passFunc func(pending int)

func (f passFunc) passed(pending int) { f(pending) }
