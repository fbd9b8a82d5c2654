package access

import (
	"context"
	"errors"
	"time"

	"github.com/botctl/botctl/pkg/schema"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
)

// dedupeTimeout bounds the task bucket read that finds a duplicate
// callback.
const dedupeTimeout = 2 * time.Second

// hasRecord reports whether task id has a record: the callback is a
// duplicate. The read is bounded apart (dedupeTimeout): while JetStream
// fails over it waits for its timeout, and the dispatch and the receipt
// after it need their own time. JetStream's msgid dedupe still catches a
// duplicate this read missed.
//
// Not a record of this very callback: the read runs beside the publish,
// and a worker that pulls the task first opens its record from the queue
// message, with this callback's req_id and term. Taken for a duplicate,
// the callback would get no receipt and its task no announcement to the
// pusher, and its answer could be lost. A redelivery comes with a new
// req_id, or in another term.
func hasRecord(ctx context.Context, js *bound, id, reqID string, term int64) bool {
	ctx, cancel := context.WithTimeout(ctx, dedupeTimeout)
	defer cancel()
	r, _, err := task.Get(ctx, js.store.Tasks(), id)
	switch {
	case errors.Is(err, task.ErrCorruptRecord), errors.Is(err, schema.ErrNewer):
		return true // a record, unreadable here: not this callback's
	case err != nil:
		return false
	}
	return r.ReqID != reqID || r.TermRev != term
}

// answeredWithoutTask reports whether bot's message msgid was answered
// without a task (a refusal, a command, unfit content, a failed
// download, a busy reply: markSeen), bounded as hasRecord. Such a message
// has no record, and a leader whose dedupe memory never saw it (a
// failover, a restart) would answer WeCom's redelivery a second time.
// Not this very callback's mark: it is written after its reply, and
// every reply waits for this read first.
func answeredWithoutTask(ctx context.Context, js *bound, bot, msgid string) bool {
	ctx, cancel := context.WithTimeout(ctx, dedupeTimeout)
	defer cancel()
	seen, err := js.store.Seen(ctx, bot, msgid)
	return err == nil && seen
}

// dedupeRead is the task bucket's answer to "does this callback's task
// exist already?" (the callback is a duplicate), read beside what
// follows it on the receipt's path: recorded waits for the answer.
type dedupeRead struct {
	done chan struct{} // closed with dup set; nil: nothing to read (not recorded)
	dup  bool
}

// readDedupe starts the read of bot's message msgid's task record
// (hasRecord), and without one its mark of an answer without a task
// (answeredWithoutTask), unless JetStream is away (js nil); took learns
// how long it took.
func readDedupe(ctx context.Context, js *bound, bot, msgid, reqID string, term int64, took func(time.Duration)) *dedupeRead {
	r := &dedupeRead{}
	if js == nil {
		return r
	}
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		t0 := time.Now()
		r.dup = hasRecord(ctx, js, task.ID(bot, msgid), reqID, term) || answeredWithoutTask(ctx, js, bot, msgid)
		took(time.Since(t0))
	}()
	return r
}

// recorded waits for the read and reports whether the record exists. It
// may be called any number of times, from any goroutine: the receipt
// waits for the read and the publish at once, not one after the other.
func (r *dedupeRead) recorded() bool {
	if r == nil || r.done == nil {
		return false
	}
	<-r.done
	return r.dup
}

// freshMargin is how long after a connection was subscribed a message
// must have been created (its create_time, WeCom's clock, in whole
// seconds) to be fresh: WeCom pushes a message to the connection
// subscribed when it is created, so a fresh one was delivered to no
// other. The margin covers the two clocks' skew.
const freshMargin = 5 * time.Second

// fresh reports whether m, delivered on c and new to the dedupe memory,
// cannot be a duplicate: created after c was subscribed (no earlier
// connection, of this node or another, received it), and after the
// dedupe memory last forgot a message (a redelivery of what it forgot
// carries that message's older create_time). The task bucket's read then
// has nothing to find.
func (a *Access) fresh(c *wecom.Conn, m *wecom.MsgCallback) bool {
	if c == nil || m.CreateTime <= 0 {
		return false
	}
	since := c.Vitals().Connected
	if since.IsZero() {
		return false
	}
	if t := a.seen.evictedAt(); t.After(since) {
		since = t
	}
	return time.Unix(m.CreateTime, 0).After(since.Add(freshMargin))
}
