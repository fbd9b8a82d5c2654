package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/schema"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// SettleRotation records the outcome of proving rec's pending secret on
// node: refusal nil, the rotation is proved; else WeCom's refusal is
// recorded and the secret before restored. It acts only while the record
// is still rec (the same revision): a rotation made meanwhile is left for
// its own proof (ErrChanged).
func SettleRotation(ctx context.Context, cli *clientv3.Client, prefix string, rec Bot, node string, refusal error, now time.Time) error {
	if rec.Rotation == nil || rec.Rotation.State != RotationPending {
		return nil
	}
	b := rec
	r := Rotation{State: RotationProved, Node: node, At: now.UTC()}
	if refusal != nil {
		r.State, r.Error = RotationRefused, refusal.Error()
		if rec.Rotation.Previous != nil {
			b.Secret = *rec.Rotation.Previous
		}
	}
	b.Rotation, b.Updated = &r, now.UTC()
	raw, err := schema.Marshal(b)
	if err != nil {
		return fmt.Errorf("encode bot %s: %w", b.ID, err)
	}
	key := Key(prefix, b.ID)
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rec.Rev)).Then(clientv3.OpPut(key, string(raw))).Commit()
	if err != nil {
		return fmt.Errorf("record the rotation of bot %s: %w", b.ID, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: bot %s was changed since its rotation was read (revision %d)", ErrChanged, b.ID, rec.Rev)
	}
	return nil
}

// AwaitRotation waits until bot's rotation stored at rev is settled
// (proved or refused) and returns the record then; ctx's end: the record
// last read, still pending, and ctx's error.
func AwaitRotation(ctx context.Context, cli *clientv3.Client, prefix, bot string, rev int64) (Bot, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := cli.Watch(wctx, Key(prefix, bot), clientv3.WithRev(rev))
	last := Bot{ID: bot}
	for wr := range ch {
		if err := wr.Err(); err != nil {
			return last, fmt.Errorf("watch bot %s: %w", bot, err)
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return last, fmt.Errorf("%w: bot %s was removed while its rotation was pending", ErrNotFound, bot)
			}
			b, err := decode(prefix, ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision)
			if err != nil {
				return last, err
			}
			last = b
			if b.Rotation == nil || b.Rotation.State != RotationPending {
				return b, nil
			}
		}
	}
	return last, ctx.Err()
}
