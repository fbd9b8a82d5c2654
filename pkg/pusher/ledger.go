package pusher

// The ledger: every write of a task record the pusher makes goes through
// it, so the record cache (active.go) cannot be left stale by a write
// that forgot to drop it. A progress frame's write (shown) keeps the
// record it wrote, with its revision; every other write drops the cached
// record, and the next step reads what the write left.

import (
	"context"
	"time"

	"github.com/botctl/botctl/pkg/task"
)

type ledger struct{ p *Pusher }

// shown records a progress frame (hash "" for a heartbeat) and caches the
// record written; a failed write drops the cache.
func (l ledger) shown(ctx context.Context, r *task.Record, rev uint64, hash string, at time.Time) error {
	next, nextRev, err := l.p.cfg.Lifecycle.ShownFrom(ctx, r, rev, hash, at)
	if err != nil {
		l.p.forget(r.ID)
		return err
	}
	l.p.remember(r.ID, next, nextRev)
	return nil
}

func (l ledger) finalIntent(ctx context.Context, r *task.Record, rev uint64) (*task.Record, uint64, error) {
	l.p.forget(r.ID)
	return l.p.cfg.Lifecycle.FinalIntentFrom(ctx, r, rev)
}

func (l ledger) deliveredFrom(ctx context.Context, r *task.Record, rev uint64, text, why string, parts int) (*task.Record, error) {
	l.p.forget(r.ID)
	return l.p.cfg.Lifecycle.DeliveredFrom(ctx, r, rev, text, why, parts)
}

func (l ledger) delivered(ctx context.Context, id, text, why string, parts int) (*task.Record, error) {
	l.p.forget(id)
	return l.p.cfg.Lifecycle.Delivered(ctx, id, text, why, parts)
}

func (l ledger) truncate(ctx context.Context, id, why string) (*task.Record, error) {
	l.p.forget(id)
	return l.p.cfg.Lifecycle.Truncate(ctx, id, why)
}

func (l ledger) partPushed(ctx context.Context, id string, n int) (*task.Record, error) {
	l.p.forget(id)
	return l.p.cfg.Lifecycle.PartPushed(ctx, id, n)
}

func (l ledger) sendFailed(ctx context.Context, id string, sendErr error, maxAttempts int) (*task.Record, error) {
	l.p.forget(id)
	return l.p.cfg.Lifecycle.SendFailed(ctx, id, sendErr, maxAttempts)
}

func (l ledger) expired(ctx context.Context, id string, owedFor time.Duration) (*task.Record, error) {
	l.p.forget(id)
	return l.p.cfg.Lifecycle.Expired(ctx, id, owedFor)
}
