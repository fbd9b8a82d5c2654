package alert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/schema"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// SyntheticKey is the key, in the incidents bucket, of the record of the
// last synthetic alert (outside incident.WatchFilter, so incident.Store
// never lists it).
const SyntheticKey = "alerter.synthetic"

// SyntheticRecord is the value at SyntheticKey.
type SyntheticRecord struct {
	At   time.Time `json:"at"`
	ID   string    `json:"id"`
	Node string    `json:"node"`
}

// LastSynthetic reads when the last synthetic alert was sent, by any
// alerter on kv (the incidents bucket); ok is false if none ever was.
func LastSynthetic(ctx context.Context, kv natsjs.KeyValue) (rec SyntheticRecord, rev uint64, ok bool, err error) {
	e, err := kv.Get(ctx, SyntheticKey)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return rec, 0, false, nil
	}
	if err != nil {
		return rec, 0, false, fmt.Errorf("read %s: %w", SyntheticKey, err)
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		// Unreadable: treat as never sent, and overwrite it.
		return rec, e.Revision(), false, nil
	}
	return rec, e.Revision(), true, nil
}

func (l *loop) loadSynthetic(ctx context.Context) error {
	if l.cfg.Synthetic <= 0 {
		return nil
	}
	rec, rev, _, err := LastSynthetic(ctx, l.a.store.KV())
	if err != nil {
		return err
	}
	l.synthAt, l.synthRev = rec.At, rev
	return nil
}

// synthetic sends the synthetic alert when it is due: Synthetic after
// the last one any alerter sent (at once if none ever was). The record
// is written first, with a compare-and-set: of two alerters only one
// sends, and an alerter taking over does not resend at once.
func (l *loop) synthetic(ctx context.Context, now time.Time) {
	if l.cfg.Synthetic <= 0 || (!l.synthAt.IsZero() && now.Before(l.synthAt.Add(l.cfg.Synthetic))) {
		return
	}
	kv := l.a.store.KV()
	rec := SyntheticRecord{At: now, ID: "synthetic-" + now.Format("20060102T150405Z"), Node: l.cfg.NodeID}
	raw, _ := schema.Marshal(rec)
	var rev uint64
	var err error
	if l.synthRev == 0 {
		rev, err = kv.Create(ctx, SyntheticKey, raw)
	} else {
		rev, err = kv.Update(ctx, SyntheticKey, raw, l.synthRev)
	}
	if err != nil {
		if jetstream.LostCAS(err) {
			// Another alerter sent one meanwhile: take its time.
			if err := l.loadSynthetic(ctx); err != nil {
				l.log.Warn().Err(err).Msg("synthetic alert: reread failed")
			}
			return
		}
		l.log.Warn().Err(err).Msg("synthetic alert not recorded; will retry")
		return
	}
	l.synthAt, l.synthRev = now, rev
	l.send(Alert{
		ID: rec.ID, Kind: KindSynthetic, Level: incident.Auto, At: now, Instances: []Instance{},
		Summary: fmt.Sprintf("synthetic alert from node %s: the alert path works. The next one is due by %s.",
			l.cfg.NodeID, now.Add(l.cfg.Synthetic).Format(time.RFC3339)),
		NextAction: fmt.Sprintf("None. If no synthetic alert arrives within %s of this one (plus a margin), the alerter is down: check `botctl status` and the nodes' logs (docs/alerts.md, dead man's switch).", l.cfg.Synthetic),
	})
}
