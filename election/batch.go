package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The node pulse (see the package comment, "Hung leaders"): one record per
// node, NodePulsePrefix+node, written every PulseInterval by the node's
// Batch, holding for each term the node leads a progress counter that only
// that term's own loop advances. A leader's pulse is its counter moving in
// a record etcd accepted; one write a node per interval replaces one write
// a bot.

// DefaultNodePulsePrefix is where nodes publish their pulse record:
// node N's is "/botctl/nodepulse/N".
const DefaultNodePulsePrefix = etcdkeys.Root + etcdkeys.NodePulseDir

// nodeRecord is a node pulse record's value: per bot, the term's
// revision and its counter.
type nodeRecord struct {
	Node  string              `json:"node"`
	Terms map[string][2]int64 `json:"terms"`
}

// BatchConfig configures a node's Batch.
type BatchConfig struct {
	// NodeID names the node; its record is NodePulsePrefix+NodeID.
	NodeID string
	// NodePulsePrefix: default DefaultNodePulsePrefix. Every node of a
	// deployment must use the same one, and the Electors given this Batch
	// the same in their Config.
	NodePulsePrefix string
	// PulseInterval: how often the record is written. Default
	// DefaultPulseInterval; the Electors given this Batch must use the
	// same.
	PulseInterval time.Duration
	// HedgeAfter: a write unanswered this long is sent again beside the
	// first (hedge.go). Default half of PulseInterval.
	HedgeAfter time.Duration
	Logger     zerolog.Logger
	Clock      clock.Clock
}

// Batch is one node's pulse for every bot it leads: give it to each of the
// node's Electors (Config.Batch) and Run it for as long as any of them may
// lead. It writes the node's record every PulseInterval, and follows every
// node's record for the node's standbys (one watch, each record decoded
// once).
type Batch struct {
	cli  *clientv3.Client
	cfg  BatchConfig
	key  string
	log  zerolog.Logger
	read *records

	mu      sync.Mutex
	terms   map[string]*beat // by bot
	started int64            // writes begun
	written int64            // the latest begun write that etcd accepted
	changed chan struct{}    // closed when written moves
	flush   chan struct{}    // a term waits for its first write

	hold atomic.Pointer[chan struct{}] // tests: the whole node hangs
}

// beat is one term's entry: its revision and its counter, which only the
// term's own loop advances.
type beat struct {
	rev int64
	n   atomic.Int64
}

// NewBatch returns the node's Batch; Run it.
func NewBatch(cli *clientv3.Client, cfg BatchConfig) (*Batch, error) {
	if cli == nil {
		return nil, errors.New("election: nil etcd client")
	}
	if cfg.NodeID == "" || strings.Contains(cfg.NodeID, "/") {
		return nil, fmt.Errorf("election: batch NodeID %q must be set and must not contain '/'", cfg.NodeID)
	}
	if cfg.NodePulsePrefix == "" {
		cfg.NodePulsePrefix = DefaultNodePulsePrefix
	}
	if cfg.PulseInterval == 0 {
		cfg.PulseInterval = DefaultPulseInterval
	}
	if cfg.PulseInterval < MinPulseInterval {
		return nil, fmt.Errorf("election: batch PulseInterval (%s) must be at least %s", cfg.PulseInterval, MinPulseInterval)
	}
	if cfg.HedgeAfter <= 0 {
		cfg.HedgeAfter = cfg.PulseInterval / 2
	}
	cfg.Clock = clock.Or(cfg.Clock)
	log := cfg.Logger.With().Str("node", cfg.NodeID).Logger()
	return &Batch{
		cli: cli, cfg: cfg, key: cfg.NodePulsePrefix + cfg.NodeID, log: log,
		read:    newRecords(cli, cfg.NodePulsePrefix, cfg.PulseInterval, log),
		terms:   map[string]*beat{},
		changed: make(chan struct{}),
		flush:   make(chan struct{}, 1),
	}, nil
}

// Key is the node's record.
func (b *Batch) Key() string { return b.key }

// Run writes the node's record every PulseInterval until ctx ends, then
// deletes it (best effort: a record left behind names terms that are
// over, which no standby counts).
func (b *Batch) Run(ctx context.Context) {
	tick := b.cfg.Clock.NewTicker(b.cfg.PulseInterval)
	defer tick.Stop()
	failing := 0
	last := b.cfg.Clock.Now()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), b.cfg.PulseInterval)
			b.cli.Delete(dctx, b.key)
			cancel()
			return
		case <-tick.C():
		case <-b.flush:
		}
		if b.held(ctx) != nil {
			continue
		}
		// A late tick means this process was paused (GC, a loaded
		// machine): the terms' loops, woken with it, get one step of
		// theirs to advance their counters before they are copied, or the
		// record would show them standing still one interval longer.
		if b.cfg.Clock.Since(last) > b.cfg.PulseInterval+b.cfg.PulseInterval/4 {
			t := b.cfg.Clock.NewTimer(b.cfg.PulseInterval / 4)
			select {
			case <-t.C():
			case <-ctx.Done():
			}
			t.Stop()
		}
		last = b.cfg.Clock.Now()
		if err := b.write(ctx); err != nil && ctx.Err() == nil {
			failing++
			if failing == 1 || failing%10 == 0 {
				b.log.Warn().Err(err).Int("failed", failing).Msg("node pulse failed; standbys may depose this node's leaders if it keeps failing")
			}
			continue
		}
		if failing > 0 {
			b.log.Info().Int("failed", failing).Msg("node pulse written again")
		}
		failing = 0
	}
}

// write puts the record with every term's counter as it is now.
func (b *Batch) write(ctx context.Context) error {
	b.mu.Lock()
	b.started++
	seq := b.started
	rec := nodeRecord{Node: b.cfg.NodeID, Terms: make(map[string][2]int64, len(b.terms))}
	for bot, t := range b.terms {
		rec.Terms[bot] = [2]int64{t.rev, t.n.Load()}
	}
	b.mu.Unlock()
	val, err := schema.Marshal(rec)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, b.cfg.PulseInterval*2)
	defer cancel()
	_, err = hedge(wctx, b.cfg.Clock, b.cfg.HedgeAfter, func(ctx context.Context) (struct{}, error) {
		_, err := b.cli.Put(ctx, b.key, string(val))
		return struct{}{}, err
	})
	if err != nil {
		return fmt.Errorf("node pulse %s: %w", b.key, err)
	}
	b.mu.Lock()
	if seq > b.written {
		b.written = seq
		close(b.changed)
		b.changed = make(chan struct{})
	}
	b.mu.Unlock()
	return nil
}

// add enters a term (the bot's, revision rev) in the record; first waits
// for the first write that holds it.
func (b *Batch) add(bot string, rev int64) *beat {
	t := &beat{rev: rev}
	t.n.Store(1)
	b.mu.Lock()
	b.terms[bot] = t
	b.mu.Unlock()
	return t
}

// first waits until a write begun after the call was accepted by etcd.
func (b *Batch) first(ctx context.Context) error {
	b.mu.Lock()
	need := b.started + 1
	b.mu.Unlock()
	select {
	case b.flush <- struct{}{}:
	default: // a write is asked for already
	}
	for {
		b.mu.Lock()
		ok, ch := b.written >= need, b.changed
		b.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("first node pulse: %w", ctx.Err())
		}
	}
}

// remove takes a term out of the record (from the next write on).
func (b *Batch) remove(bot string, t *beat) {
	b.mu.Lock()
	if b.terms[bot] == t {
		delete(b.terms, bot)
	}
	b.mu.Unlock()
}

func (b *Batch) held(ctx context.Context) error {
	if ch := b.hold.Load(); ch != nil {
		select {
		case <-*ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// parseRecord reads bot's term rev from a node record (nil: absent):
// the sight a standby takes, at revision at.
func parseRecord(at int64, raw []byte, modRev int64, bot string, rev int64) pulseSeen {
	s := pulseSeen{At: at, Rev: modRev}
	if raw == nil {
		return s
	}
	var rec nodeRecord
	if schema.Check("node pulse", raw) != nil || json.Unmarshal(raw, &rec) != nil {
		return s // unreadable: no progress seen
	}
	if t, ok := rec.Terms[bot]; ok && t[0] == rev {
		s.N = t[1]
	}
	return s
}
