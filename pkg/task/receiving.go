package task

import (
	"context"
	"time"

	"github.com/botctl/botctl/jetstream"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// A message with files is recorded before its files are downloaded (the
// leader's inbound path: Receive), so that a leader that dies
// mid-download leaves a trace: the record, queued and in the undelivered
// index, with ReceivingUntil, the time by which its files are taken or
// given up. Then one of three things happens:
//
//   - the files are taken and the task dispatched: the inbound path's
//     Open sets its tier, and it is a task like any other;
//   - the files are refused (too big, expired, a timeout, storage full) or
//     the conversation is busy, and the user is told at once: Unreceived
//     removes the record, so nothing tells them again;
//   - the leader dies (or is cut off) first: past ReceivingUntil and
//     ReceivingGrace, the sweep of whichever node leads gives it up, and
//     its pusher tells the user it failed.

// ReceivingGrace is how long past its ReceivingUntil a task still being
// received is left alone by the sweep: the store of the last file and the
// dispatch after the download take this much at most.
const ReceivingGrace = 15 * time.Second

// Receiving reports whether r was recorded before its files were taken
// and has not been dispatched since (no tier, no attempt).
func (r *Record) Receiving() bool {
	return !r.ReceivingUntil.IsZero() && r.Exec == Queued && r.Attempt == 0 && r.Tier == ""
}

// receivingLost: r is still being received past ReceivingUntil and the
// grace: the leader receiving it died or was cut off.
func receivingLost(r *Record, now time.Time) bool {
	return r.Receiving() && now.After(r.ReceivingUntil.Add(ReceivingGrace))
}

// Receive records r, a message whose files are about to be downloaded,
// to be taken by until (Record.ReceivingUntil): Open, with that mark.
// The task is put in the undelivered index before its record is written:
// a task being received has no queue message, so the index is the only
// way the sweep finds it, and no record exists that a next leader's sweep
// cannot find, whenever the leader writing it dies. An index entry whose
// record was never written (the record's write failed, or the leader
// died between the two) is left alone by the sweep.
func (l *Lifecycle) Receive(ctx context.Context, r *Record, until time.Time) (*Record, error) {
	r.ReceivingUntil = until.UTC()
	if err := l.store.MarkUndelivered(ctx, r.Bot, r.ID); err != nil {
		return nil, err
	}
	return l.Open(ctx, r)
}

// Unreceived removes the record Receive wrote for a message that takes no
// task after all (its files refused, its conversation busy) and whose
// user was told at receipt: no task was run, and nothing tells the user
// again (the inbound path's mark of an answer without a task dedupes a
// redelivery, as for any refusal). A task dispatched meanwhile, or ended,
// is left as it is; removed reports whether it was removed.
func (l *Lifecycle) Unreceived(ctx context.Context, id string) (removed bool, err error) {
	for try := 0; ; try++ {
		jetstream.CASPause(ctx, try)
		r, rev, err := Get(ctx, l.store.Tasks(), id)
		if err != nil {
			return false, err
		}
		if !r.Receiving() {
			return false, nil
		}
		err = l.store.Tasks().Delete(ctx, id, natsjs.LastRevision(rev))
		if err == nil {
			l.store.ClearUndelivered(ctx, r.Bot, id)
			return true, nil
		}
		if !jetstream.LostCAS(err) || try >= openTries || ctx.Err() != nil {
			return false, err
		}
	}
}
