package task

import (
	"testing"
	"time"
)

// The sweep's selection, one decision a case, at explicit times: no
// NATS, no clock. The tests over real NATS (sweep_test.go, release_test.go)
// check the outcomes of these rules with generous deadlines; the exact
// times (just before, at, just after a deadline or the grace) are checked
// here.

var (
	t0    = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	rules = sweepRules{deadline: time.Hour, grace: 2 * time.Minute} // grace: twice an ack wait of a minute
)

const ms = time.Millisecond

// running is a record whose first attempt began at started (zero: none
// began), received at received.
func running(received, started time.Time) *Record {
	r := &Record{ID: "b:m1", Exec: Running, Received: received, Started: started}
	if started.IsZero() {
		r.Exec = Queued
	}
	return r
}

// receiving is a record written at received before its files were
// taken, to be taken by until; tier "": not dispatched since.
func receiving(received, until time.Time, tier string) *Record {
	return &Record{ID: "b:m1", Exec: Queued, Received: received, ReceivingUntil: until, Tier: tier}
}

// finished is a record that succeeded at at.
func finished(at time.Time) *Record {
	return &Record{ID: "b:m1", Exec: Succeeded, Received: at.Add(-time.Minute), Started: at.Add(-time.Minute),
		Transitions: []Transition{{At: at.Add(-time.Minute), Dim: "exec", To: string(Running)}, {At: at, Dim: "exec", To: string(Succeeded)}}}
}

func found(sent time.Time, r *Record) queued {
	return queued{sent: sent, task: r.ID, read: recordFound, rec: r}
}

func TestDecideQueued(t *testing.T) {
	noRecord := queued{sent: t0, task: "b:m1", read: recordMissing}
	failing := queued{sent: t0, task: "b:m1", read: recordFailing}
	cases := []struct {
		name           string
		now, serverNow time.Time // serverNow zero: the server did not say
		rules          sweepRules
		in             queued
		want           sweepAction
	}{
		// TestSweepGivesUpAQueueMessageWithoutRecordPastTheDeadline: a
		// message whose record never landed is left to the worker that
		// opens it until it is older than the deadline, then given up.
		{"no record: just before the deadline", t0.Add(time.Hour - ms), t0.Add(time.Hour - ms), rules, noRecord, sweepLeave},
		{"no record: at the deadline", t0.Add(time.Hour), t0.Add(time.Hour), rules, noRecord, sweepLeave},
		{"no record: just after the deadline", t0.Add(time.Hour + ms), t0.Add(time.Hour + ms), rules, noRecord, sweepAbandon},
		{"no record: the message's age is the server's (young there)", t0.Add(2 * time.Hour), t0.Add(time.Hour - ms), rules, noRecord, sweepLeave},
		{"no record: the message's age is the server's (old there)", t0, t0.Add(time.Hour + ms), rules, noRecord, sweepAbandon},
		{"no record: a server that does not say, this clock (young)", t0.Add(time.Hour), time.Time{}, rules, noRecord, sweepLeave},
		{"no record: a server that does not say, this clock (old)", t0.Add(time.Hour + ms), time.Time{}, rules, noRecord, sweepAbandon},
		{"no record: no deadline", t0.Add(1000 * time.Hour), t0.Add(1000 * time.Hour), sweepRules{grace: rules.grace}, noRecord, sweepLeave},

		// TestSweepFreesConversationsWhileTheTasksBucketFails: no record
		// can be read, so the message's age alone decides.
		{"bucket failing: just before the deadline", t0.Add(time.Hour - ms), t0.Add(time.Hour - ms), rules, failing, sweepLeave},
		{"bucket failing: just after the deadline", t0.Add(time.Hour + ms), t0.Add(time.Hour + ms), rules, failing, sweepAbandon},

		// TestSweepSkipsACorruptRecord: reported every round, its message
		// removed once past the deadline.
		{"corrupt record: just before the deadline", t0.Add(time.Hour), t0.Add(time.Hour), rules, queued{sent: t0, task: "b:m1", read: recordCorrupt}, sweepCorrupt},
		{"corrupt record: just after the deadline", t0.Add(time.Hour + ms), t0.Add(time.Hour + ms), rules, queued{sent: t0, task: "b:m1", read: recordCorrupt}, sweepRemoveCorrupt},

		// A message that is not a task's: counted, removed past the deadline.
		{"not a task's: just before the deadline", t0.Add(time.Hour), t0.Add(time.Hour), rules, queued{sent: t0}, sweepUnreadable},
		{"not a task's: just after the deadline", t0.Add(time.Hour + ms), t0.Add(time.Hour + ms), rules, queued{sent: t0}, sweepRemoveUnreadable},

		// A record that could not be read for another reason than the
		// bucket failing (the round's context ended): nothing, however old.
		{"record read error: left", t0.Add(2 * time.Hour), t0.Add(2 * time.Hour), rules, queued{sent: t0, task: "b:m1", read: recordError}, sweepLeave},

		// TestSweep: the message of a finished task (its ack lost) is
		// removed once the task's last change of execution and the
		// message are older than the grace.
		{"finished: at the grace", t0.Add(2 * time.Minute), t0.Add(2 * time.Minute), rules, found(t0, finished(t0)), sweepLeave},
		{"finished: just after the grace", t0.Add(2*time.Minute + ms), t0.Add(2*time.Minute + ms), rules, found(t0, finished(t0)), sweepRelease},
		{"finished: the message within the grace (server's clock)", t0.Add(time.Hour), t0.Add(2 * time.Minute), rules, found(t0, finished(t0)), sweepLeave},
		{"finished: the record within the grace (this clock)", t0.Add(2 * time.Minute), t0.Add(time.Hour), rules, found(t0, finished(t0)), sweepLeave},
		{"finished: a delivery change later does not count", t0.Add(2*time.Minute + ms), t0.Add(2*time.Minute + ms), rules,
			found(t0, withDelivery(finished(t0), t0.Add(2*time.Minute))), sweepRelease},
		{"finished without transitions: counts from its receipt", t0.Add(2*time.Minute + ms), t0.Add(2*time.Minute + ms), rules,
			found(t0, &Record{ID: "b:m1", Exec: Failed, Received: t0}), sweepRelease},
		{"finished long past the deadline: never given up", t0.Add(time.Minute), t0.Add(time.Minute), rules,
			found(t0.Add(-3*time.Hour), finished(t0)), sweepLeave},

		// TestSweep: a task on the queue past the execution deadline is
		// given up, the deadline counting from its first attempt's start
		// on this node's clock, whatever the message's age.
		{"running: at the deadline", t0.Add(time.Hour), t0.Add(time.Hour), rules, found(t0, running(t0, t0)), sweepLeave},
		{"running: just after the deadline", t0.Add(time.Hour + ms), t0.Add(time.Hour + ms), rules, found(t0, running(t0, t0)), sweepGiveUp},
		{"running: the deadline counts from the first start", t0.Add(time.Hour + ms), t0.Add(time.Hour + ms), rules,
			found(t0, running(t0, t0.Add(30*time.Minute))), sweepLeave},
		{"running: from the first start, just after", t0.Add(90*time.Minute + ms), t0.Add(90*time.Minute + ms), rules,
			found(t0, running(t0, t0.Add(30*time.Minute))), sweepGiveUp},
		{"running: a young message does not save it", t0.Add(time.Hour + ms), t0.Add(time.Hour + ms), rules,
			found(t0.Add(time.Hour), running(t0, t0)), sweepGiveUp},
		{"never started: counts from its receipt", t0.Add(time.Hour + ms), t0.Add(time.Hour + ms), rules, found(t0, running(t0, time.Time{})), sweepGiveUp},
		{"running: no deadline", t0.Add(1000 * time.Hour), t0.Add(1000 * time.Hour), sweepRules{grace: rules.grace}, found(t0, running(t0, t0)), sweepLeave},
	}
	for _, c := range cases {
		if got := decideQueued(c.now, c.serverNow, c.rules, c.in); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

func withDelivery(r *Record, at time.Time) *Record {
	r.Transitions = append(r.Transitions, Transition{At: at, Dim: "delivery", To: string(Delivered)})
	return r
}

// Tasks off the queue (TestSweep's and TestSweepSkipsACorruptRecord's
// local task): given up just after the deadline, counted from the first
// attempt's start; a corrupt record reported; nothing else.
func TestDecideUndelivered(t *testing.T) {
	cases := []struct {
		name string
		now  time.Time
		read recordRead
		r    *Record
		want sweepAction
	}{
		{"running: at the deadline", t0.Add(time.Hour), recordFound, running(t0, t0), sweepLeave},
		{"running: just after the deadline", t0.Add(time.Hour + ms), recordFound, running(t0, t0), sweepGiveUp},
		{"never started: just after the deadline from its receipt", t0.Add(time.Hour + ms), recordFound, running(t0, time.Time{}), sweepGiveUp},
		{"finished: never given up", t0.Add(10 * time.Hour), recordFound, finished(t0), sweepLeave},
		{"corrupt: reported", t0.Add(10 * time.Hour), recordCorrupt, nil, sweepCorrupt},
		{"missing: left", t0.Add(10 * time.Hour), recordMissing, nil, sweepLeave},
		{"bucket failing: left", t0.Add(10 * time.Hour), recordFailing, nil, sweepLeave},
		{"another error: left", t0.Add(10 * time.Hour), recordError, nil, sweepLeave},
		{"receiving: within its time", t0.Add(2 * time.Minute), recordFound, receiving(t0, t0.Add(2*time.Minute), ""), sweepLeave},
		{"receiving: at the grace's end", t0.Add(2*time.Minute + ReceivingGrace), recordFound, receiving(t0, t0.Add(2*time.Minute), ""), sweepLeave},
		{"receiving: past the grace (its leader died)", t0.Add(2*time.Minute + ReceivingGrace + ms), recordFound, receiving(t0, t0.Add(2*time.Minute), ""), sweepUnreceived},
		{"received and dispatched: a task like any other", t0.Add(2*time.Minute + ReceivingGrace + ms), recordFound, receiving(t0, t0.Add(2*time.Minute), "queue"), sweepLeave},
	}
	for _, c := range cases {
		if got := decideUndelivered(c.now, rules, c.read, c.r); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	if got := decideUndelivered(t0.Add(1000*time.Hour), sweepRules{}, recordFound, running(t0, t0)); got != sweepLeave {
		t.Errorf("no deadline: %s, want leave", got)
	}
}
