package election

import "time"

// The standby's decision, shared by both pulses (see the package comment,
// "Hung leaders"): the per-bot pulse key a leader of botctl 0.5.0 (or one
// without a Batch) writes, and the node pulse record a Batch writes for
// every term of its node. It is pure: what was seen, when, and what a
// linearizable read answered go in; whether to depose comes out.

// pulseSeen is one sight of a leader's pulse.
type pulseSeen struct {
	// At is the etcd revision the sight is as of (a watch event's, a
	// read's header): an older sight than the last one is ignored.
	At int64
	// Rev is the ModRevision of the key the deposition compares on (the
	// per-bot pulse key, or the leader's node record); 0 if absent.
	Rev int64
	// N is the leader's term's progress: the per-bot pulse key's
	// ModRevision while it is bound to the leader's lease, or the term's
	// counter in its node's record; 0 if there is none for this term.
	N int64
}

// stall follows one leader's pulse from one standby.
type stall struct {
	timeout  time.Duration // the larger of the leader's advertised PulseTimeout and ours
	interval time.Duration // our PulseInterval: a confirming read slower than it is no evidence
	seen     pulseSeen
	lastMove time.Time // by this node's clock
}

func newStall(now time.Time, first pulseSeen, timeout, interval time.Duration) *stall {
	return &stall{timeout: timeout, interval: interval, seen: first, lastMove: now}
}

// observe records a sight; moved reports that the term's progress moved
// (the window starts again from now). A sight older than the last one
// changes nothing.
func (s *stall) observe(now time.Time, cur pulseSeen) (moved bool) {
	if cur.At < s.seen.At {
		return false
	}
	moved = cur.N != 0 && cur.N != s.seen.N
	s.seen = cur
	if moved {
		s.lastMove = now
	}
	return moved
}

// due is how long until the pulse has stood still for the timeout (≤ 0:
// confirm now).
func (s *stall) due(now time.Time) time.Duration { return s.lastMove.Add(s.timeout).Sub(now) }

// restart begins a new window from now (the evidence was not clean).
func (s *stall) restart(now time.Time) { s.lastMove = now }

type verdict int

const (
	// notYet: the window has not passed.
	notYet verdict = iota
	// lagged: the read shows progress this standby's watch had not
	// delivered: this node is slow, not the leader. The sight is taken.
	lagged
	// slowRead: the read took longer than PulseInterval; etcd (or this
	// node) is slow, and the leader's pulses may be late for the same
	// reason.
	slowRead
	// depose: the term's progress stood still for the timeout, confirmed
	// by the read; depose compared on the read's Rev.
	depose
)

func (v verdict) String() string {
	return [...]string{"not yet", "lagged", "slow read", "depose"}[v]
}

// confirm decides on a linearizable read (read, taking rtt) made once
// the window passed. Only depose is evidence of a hang.
func (s *stall) confirm(now time.Time, read pulseSeen, rtt time.Duration) verdict {
	switch {
	case read.N != s.seen.N:
		s.seen = read
		return lagged
	case rtt > s.interval:
		return slowRead
	case s.due(now) > 0:
		return notYet
	}
	s.seen = read
	return depose
}
