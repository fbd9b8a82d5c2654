package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/schema"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Watermark is a bot's inbound watermark as stored.
type Watermark struct {
	Created time.Time `json:"created"` // create time of the latest message handled to the end
	Node    string    `json:"node"`
	Updated time.Time `json:"updated"`
}

func watermarkKey(bot string) string { return jetstream.BotKey(bot) + ".inbound" }

// LoadWatermark reads bot's inbound watermark; zero when there is none.
func LoadWatermark(ctx context.Context, store WatermarkBucket, bot string) (Watermark, error) {
	e, err := store.Watermarks().Get(ctx, watermarkKey(bot))
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return Watermark{}, nil
	}
	if err != nil {
		return Watermark{}, fmt.Errorf("inbound watermark of bot %s: %w", bot, err)
	}
	var w Watermark
	if err := json.Unmarshal(e.Value(), &w); err != nil {
		return Watermark{}, fmt.Errorf("inbound watermark of bot %s: %w", bot, err)
	}
	return w, nil
}

// Tracker keeps the inbound watermarks of a node's bots and writes them
// (Run): Handled moves a bot's mark forward in memory; a write happens
// every interval, only forward, never while the Spool holds a task or
// cannot say (a task there is not durable in the cluster yet), and not
// for a bot while a gap backfill pass of it runs (Hold).
type Tracker struct {
	Store  WatermarkBucket
	Node   string
	Spool  Spool // nil: nothing is ever held back
	Logger zerolog.Logger
	Clock  clock.Clock // what Run's interval waits on; nil: clock.Real

	mu       sync.Mutex
	pending  map[string]time.Time // bot → latest handled, not yet written
	held     map[string]int       // bot → passes under way (Hold)
	flushing sync.Mutex           // locked by a flush: Hold waits for one under way
}

// Spool is the node's local store-and-forward spool, as the Tracker sees
// it: how many tasks it holds (*jetstream.Spool).
type Spool interface {
	Len() (int, error)
}

// holding reports whether the spool holds a task, or cannot tell.
func (t *Tracker) holding() bool {
	if t.Spool == nil {
		return false
	}
	n, err := t.Spool.Len()
	return err != nil || n > 0
}

// Handled records that a message of bot created at created was handled
// to the end (its task is recorded in JetStream, or it needed none).
func (t *Tracker) Handled(bot string, created time.Time) {
	if created.IsZero() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending == nil {
		t.pending = map[string]time.Time{}
	}
	if created.After(t.pending[bot]) {
		t.pending[bot] = created
	}
}

// Run writes the watermarks every interval until ctx ends, and once more
// then.
func (t *Tracker) Run(ctx context.Context, interval time.Duration) {
	tick := clock.Or(t.Clock).NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			t.flush(fctx)
			cancel()
			return
		case <-tick.C():
			t.flush(ctx)
		}
	}
}

// Hold keeps bot's stored watermark where it is while a gap backfill
// pass runs, until release. The missed messages a pass finds are older
// than those this term's connection delivers meanwhile; a watermark moved
// past them while they wait for their busy conversation (a pass retries
// for minutes) would start the next term's pass after them, were this
// term to end first (a kill, a takeover): they would never be answered.
// release(false), for a pass that did not finish (its term ended), also
// forgets what was handled meanwhile, so that no later write moves the
// watermark past what may still be missed; the next leader's pass finds
// those messages known. A write under way when Hold is called lands
// before it returns.
func (t *Tracker) Hold(bot string) (release func(finished bool)) {
	t.flushing.Lock() // a write under way lands first
	t.mu.Lock()
	if t.held == nil {
		t.held = map[string]int{}
	}
	t.held[bot]++
	t.mu.Unlock()
	t.flushing.Unlock()
	var once sync.Once
	return func(finished bool) {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.held[bot]--; t.held[bot] <= 0 {
				delete(t.held, bot)
			}
			if !finished {
				delete(t.pending, bot)
			}
		})
	}
}

func (t *Tracker) flush(ctx context.Context) {
	if t.holding() {
		return // a spooled message must not fall behind the watermark
	}
	t.flushing.Lock()
	defer t.flushing.Unlock()
	t.mu.Lock()
	pending := map[string]time.Time{}
	for bot, created := range t.pending {
		if t.held[bot] == 0 { // a held bot's mark stays pending
			pending[bot] = created
			delete(t.pending, bot)
		}
	}
	t.mu.Unlock()
	for bot, created := range pending {
		if err := t.advance(ctx, bot, created); err != nil {
			t.Logger.Debug().Err(err).Str("bot", bot).Msg("inbound watermark not written; retrying")
			t.Handled(bot, created) // keep it for the next round
		}
	}
}

// advance writes bot's watermark if created is past the stored one.
func (t *Tracker) advance(ctx context.Context, bot string, created time.Time) error {
	return t.move(ctx, bot, created, true)
}

// Lower moves bot's stored watermark back to created if it is past it.
// The history audit finds missed messages older than what the connection
// delivered since (it reads behind the live traffic); one that waits for
// its busy conversation must be read again by the next term's pass
// should this term end first, and that pass starts at the watermark less
// the overlap. Call it under Hold, or the next flush moves it on.
func (t *Tracker) Lower(ctx context.Context, bot string, created time.Time) error {
	return t.move(ctx, bot, created, false)
}

// move writes bot's watermark created if it is past the stored one
// (forward) or before it (back).
func (t *Tracker) move(ctx context.Context, bot string, created time.Time, forward bool) error {
	kv := t.Store.Watermarks()
	for try := range 10 {
		jetstream.CASPause(ctx, try)
		e, err := kv.Get(ctx, watermarkKey(bot))
		var rev uint64
		switch {
		case errors.Is(err, natsjs.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			var cur Watermark
			if json.Unmarshal(e.Value(), &cur) == nil && (forward && !created.After(cur.Created) || !forward && !created.Before(cur.Created)) {
				return nil
			}
			rev = e.Revision()
		}
		raw, _ := schema.Marshal(Watermark{Created: created, Node: t.Node, Updated: time.Now().UTC()})
		if rev == 0 {
			_, err = kv.Create(ctx, watermarkKey(bot), raw)
		} else {
			_, err = kv.Update(ctx, watermarkKey(bot), raw, rev)
		}
		if err == nil || !jetstream.LostCAS(err) {
			return err
		}
	}
	return fmt.Errorf("inbound watermark of bot %s: too many concurrent writers", bot)
}
