package task

import (
	"errors"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"time"
)

// The sweep's selection: what one round of Sweep does with each queue
// message and each undelivered task, decided from what the round read and
// the time alone. Nothing here reads NATS or a clock; Sweep (sweep.go)
// reads, asks these functions, and performs what they say.

// sweepRules are one round's settings.
type sweepRules struct {
	// deadline: a task not finished this long after its first attempt
	// began (or after it was received, if none began) is given up, and a
	// queue message older than it is stale. Zero or less: no deadline.
	deadline time.Duration
	// grace: the queue message of a finished task is removed once both
	// the last change of the task's execution and the message are older
	// than grace (RunSweep's caller passes twice the queue's ack wait: the
	// worker's ack is over by then, or lost).
	grace time.Duration
}

// recordRead is how the read of a task's record went.
type recordRead int

const (
	recordFound   recordRead = iota // read; it decodes
	recordMissing                   // none: every write of it failed so far
	recordFailing                   // not read: the tasks bucket fails (this read, or an earlier one of the round)
	recordCorrupt                   // it does not decode (ErrCorruptRecord)
	recordError                     // another error
)

// readOf classifies the error of a record's read.
func readOf(err error) recordRead {
	switch {
	case err == nil:
		return recordFound
	case errors.Is(err, natsjs.ErrKeyNotFound):
		return recordMissing
	case errors.Is(err, ErrCorruptRecord):
		return recordCorrupt
	case StoreFailed(err):
		return recordFailing
	}
	return recordError
}

// queued is what a round knows of one conversation's queue message.
type queued struct {
	sent time.Time // the message's time, on the server's clock
	task string    // the task it carries; "": it is not a task's (it does not decode)
	read recordRead
	rec  *Record // the task's record, when read is recordFound
}

// sweepAction is what a round does with one queue message or one
// undelivered task.
type sweepAction int

const (
	// sweepLeave: nothing (a task running within its deadline, a finished
	// one within the grace, a record that could not be read for another
	// reason than the bucket failing).
	sweepLeave sweepAction = iota
	// sweepUnreadable: a message that is not a task's, counted and left
	// (the worker that pulls it terminates it).
	sweepUnreadable
	// sweepRemoveUnreadable: a message that is not a task's, past the
	// deadline: counted and removed.
	sweepRemoveUnreadable
	// sweepCorrupt: a task whose record does not decode: reported and
	// left (it can never start).
	sweepCorrupt
	// sweepRemoveCorrupt: the same, its message past the deadline:
	// reported, and the message removed.
	sweepRemoveCorrupt
	// sweepAbandon: a message past the deadline whose task has no record
	// that can be read: the task is ended from the message (or its ending
	// owed), and the message removed.
	sweepAbandon
	// sweepRelease: the message of a finished task, past the grace:
	// removed.
	sweepRelease
	// sweepGiveUp: a task past the deadline: given up (its message, if
	// any, removed even when the record cannot say so).
	sweepGiveUp
	// sweepUnreceived: a task recorded before its files were taken, never
	// dispatched, past its ReceivingUntil and ReceivingGrace (the leader
	// receiving them died): given up, its user told.
	sweepUnreceived
)

var sweepActionNames = [...]string{"leave", "unreadable", "remove unreadable", "corrupt", "remove corrupt", "abandon", "release", "give up", "unreceived"}

func (a sweepAction) String() string { return sweepActionNames[a] }

// decideQueued is what to do with the queue message m at now (this node's
// clock, by which a record's times are read) and serverNow (the server's,
// by which the message's age is read; zero: the server did not say, now).
func decideQueued(now, serverNow time.Time, rules sweepRules, m queued) sweepAction {
	if serverNow.IsZero() {
		serverNow = now
	}
	age := serverNow.Sub(m.sent)
	stale := rules.deadline > 0 && age > rules.deadline
	switch {
	case m.task == "":
		return byAge(stale, sweepUnreadable, sweepRemoveUnreadable)
	case m.read == recordMissing, m.read == recordFailing:
		// A worker opens it from the message, unless the message is past
		// the deadline.
		return byAge(stale, sweepLeave, sweepAbandon)
	case m.read == recordCorrupt:
		return byAge(stale, sweepCorrupt, sweepRemoveCorrupt)
	case m.read != recordFound:
		return sweepLeave
	case m.rec.Exec.Finished() && now.Sub(m.rec.execChanged()) > rules.grace && age > rules.grace:
		return sweepRelease
	case pastDeadline(m.rec, rules.deadline, now):
		return sweepGiveUp
	}
	return sweepLeave
}

// decideUndelivered is what to do at now with an undelivered task that
// has no queue message, its record r read as read.
func decideUndelivered(now time.Time, rules sweepRules, read recordRead, r *Record) sweepAction {
	switch {
	case read == recordCorrupt:
		return sweepCorrupt
	case read == recordFound && receivingLost(r, now):
		return sweepUnreceived
	case read == recordFound && pastDeadline(r, rules.deadline, now):
		return sweepGiveUp
	}
	return sweepLeave
}

// byAge is young's action, or old's for a stale message.
func byAge(stale bool, young, old sweepAction) sweepAction {
	if stale {
		return old
	}
	return young
}

// pastDeadline: r's execution is not over deadline after its first
// attempt began (or after it was received, if none began).
func pastDeadline(r *Record, deadline time.Duration, now time.Time) bool {
	since := r.Started
	if since.IsZero() {
		since = r.Received
	}
	return !r.Exec.Finished() && deadline > 0 && now.Sub(since) > deadline
}

// execChanged is when the execution dimension last changed.
func (r *Record) execChanged() time.Time {
	for i := len(r.Transitions) - 1; i >= 0; i-- {
		if r.Transitions[i].Dim == "exec" {
			return r.Transitions[i].At
		}
	}
	return r.Received
}
