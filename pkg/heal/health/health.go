package health

import (
	"context"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/heal/recovery"
	"github.com/botctl/botctl/pkg/wecom"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Health is one node's part of the self-healing: it implements
// node.Observer. Bind it to JetStream once the store is declared; until
// then it monitors connections but records nothing.
type Health struct {
	cfg Config
	log zerolog.Logger

	mu      sync.Mutex
	bots    map[string]*botState
	marks   map[string]bool // "<bot>.<chat>" tokens marked "may be incomplete"
	bound   *binding
	boundCh chan struct{}   // closed by Bind
	ctx     context.Context // Run's; nil until Run
	wg      sync.WaitGroup
}

type binding struct {
	kv        natsjs.KeyValue
	incidents *incident.Store
	store     Buckets
	tasks     Records
}

// botState is what this node knows of one bot. Fields other than events
// and gate are guarded by mu.
type botState struct {
	id     string
	events chan func(context.Context)
	gate   recovery.Gate

	mu       sync.Mutex
	conn     *wecom.Conn
	term     int64
	cause    *closeCause // why the monitor closed conn, if it did
	baseline *Baseline
	// baselineLoaded: baseline is the saved one (only then is it saved
	// back, so an unbound start never overwrites weeks of learning).
	baselineLoaded bool
	// authFailed is the latest time this node's subscribe was refused for
	// credentials: AuthHold waits for an ack after it.
	authFailed time.Time
	// silent: this node closed a deaf connection of b, and the silence
	// incident waits for callbacks to arrive again. silentRoute: the same
	// for one route (a group) that went deaf while the others delivered.
	silent      bool
	silentRoute string
}

// New returns a Health; Run must run for it to act.
func New(cfg Config) *Health {
	cfg.setDefaults()
	return &Health{cfg: cfg, log: cfg.Logger, bots: map[string]*botState{}, marks: map[string]bool{}, boundCh: make(chan struct{})}
}

// Bind gives Health the store: the health bucket, incidents and task
// records (for the outbound replay).
func (h *Health) Bind(store Buckets, tasks Records) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bound = &binding{kv: store.Health(), incidents: incident.NewStore(store.Incidents()), store: store, tasks: tasks}
	close(h.boundCh)
	if h.ctx != nil {
		ctx, kv := h.ctx, h.bound.kv
		h.wg.Go(func() { h.watchMarks(ctx, kv) })
	}
}

func (h *Health) binding() *binding {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.bound
}

// Run handles the bots' events until ctx ends, then waits for every
// monitor and recovery it started.
func (h *Health) Run(ctx context.Context) {
	h.mu.Lock()
	h.ctx = ctx
	bots := make([]*botState, 0, len(h.bots))
	for _, b := range h.bots {
		bots = append(bots, b)
	}
	if h.bound != nil {
		kv := h.bound.kv
		h.wg.Go(func() { h.watchMarks(ctx, kv) })
	}
	h.mu.Unlock()
	for _, b := range bots {
		h.startQueue(ctx, b)
	}
	<-ctx.Done()
	h.wg.Wait()
}

func (h *Health) bot(id string) *botState {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.bots[id]
	if b == nil {
		b = &botState{id: id, events: make(chan func(context.Context), 256)}
		h.bots[id] = b
		if h.ctx != nil {
			h.startQueue(h.ctx, b)
		}
	}
	return b
}

func (h *Health) startQueue(ctx context.Context, b *botState) {
	h.wg.Go(func() {
		// Every event records something: until JetStream is bound they
		// wait, in order (a node may lead before NATS answers).
		select {
		case <-h.boundCh:
		case <-ctx.Done():
			return
		}
		for {
			select {
			case <-ctx.Done():
				// Drain what is queued with a short deadline: an incident
				// step of a stopping node is still worth recording.
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			drain:
				for {
					select {
					case ev := <-b.events:
						ev(dctx)
					default:
						break drain
					}
				}
				cancel()
				return
			case ev := <-b.events:
				ev(ctx)
			}
		}
	})
}

// post queues ev for b, in order; the node's loop never waits for it.
func (h *Health) post(b *botState, ev func(context.Context)) {
	select {
	case b.events <- ev:
	default:
		h.log.Warn().Str("bot", b.id).Msg("health event queue full; event dropped (the record may lag)")
	}
}

// Settle waits until every event of bot posted so far has been handled, or
// ctx ends (tests, and AuthHold before it reads the incident).
func (h *Health) Settle(ctx context.Context, bot string) {
	done := make(chan struct{})
	h.post(h.bot(bot), func(context.Context) { close(done) })
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (h *Health) now() time.Time { return h.cfg.Now().UTC() }
