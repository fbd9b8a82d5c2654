// Package dispatch hands a task to compute, in three tiers: (1) the
// JetStream work queue, which healthy workers pull; (2) a configured fixed
// worker's exec API, when the queue cannot be reached; (3) the leader's own
// in-process worker, when neither can.
//
// The red line: a business refusal is an answer, not a failure. When the
// queue refuses a task because its conversation already has one
// (ErrConversationBusy), Dispatch reports Busy and stops: the task is never
// retried on another tier and never run locally. Only "unavailable" falls
// back. Every fallback is logged with its reason and counted.
//
// When the queue is unavailable the task is also written to the local
// spool (if configured), so that it reaches the queue when JetStream is
// back, whatever the fallback tiers manage: a worker that then pulls a task
// already finished by a fallback skips it (the task record says so).
package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/redact"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

// Tier names where a task went.
type Tier string

const (
	TierQueue Tier = "queue"
	TierFixed Tier = "fixed"
	TierLocal Tier = "local"
)

// ExecPath is the exec API path every node serves (tier 2).
const ExecPath = "/v1/exec"

// Outcome is where a task went.
type Outcome struct {
	Tier      Tier
	Busy      bool // refused: the conversation already has a task (an answer, not a failure)
	Duplicate bool // the msgid was dispatched before: nothing done
	Spooled   bool // written to the local spool for the queue
	Seq       uint64
}

// Config configures a Dispatcher.
type Config struct {
	// Queue is tier 1 (required).
	Queue Queue
	// Spool keeps a task for the queue while it is unavailable (nil:
	// none).
	Spool Spool
	// FixedWorker is tier 2: the base URL of a worker node's API, e.g.
	// http://10.0.0.7:8391 ("" skips the tier).
	FixedWorker string
	// Token is sent as "Authorization: Bearer <Token>" to the fixed
	// worker, whose exec API asks for it (the cluster's api.token_file);
	// "" sends none.
	Token string
	// Local is tier 3 (nil skips the tier).
	Local Local
	// PublishTimeout bounds tier 1: past it the queue counts as
	// unavailable. Default 2s.
	PublishTimeout time.Duration
	// Client calls the fixed worker. Default: 5s timeout.
	Client *http.Client
	// Metrics, if set, counts failed publishes.
	Metrics Metrics
	Logger  zerolog.Logger
}

// Queue is tier 1: the JetStream work queue (*jetstream.Store), whose
// per-conversation subject is the conversation's mutex.
type Queue interface {
	// PublishTask publishes a task for conversation with the WeCom msgid
	// as its message id; jetstream.ErrConversationBusy is the red line.
	PublishTask(ctx context.Context, bot, conversation, msgid string, payload []byte) (jetstream.PublishResult, error)
}

// Spool is the node's local store-and-forward spool, for tasks the queue
// could not take.
type Spool interface {
	// Keep writes m (payload: its JSON) for the queue.
	Keep(m task.Message, payload []byte) error
	// Holds reports whether the spool holds a task of the conversation.
	// Such a conversation is busy: a later message must not overtake its
	// spooled one.
	Holds(bot, conversation string) bool
}

// Local is tier 3: this node's worker.
type Local interface {
	// Start starts m on this node's worker and returns; an error says
	// nothing was started (every slot in use).
	Start(m task.Message) error
}

// Metrics hears of failed publishes.
type Metrics interface {
	// NATSError is called with the operation ("publish") once for every
	// publish JetStream did not confirm (ErrUnavailable) or refused
	// (ErrTaskRejected): the node's NATS error counter. Never for a busy
	// conversation (an answer, not a failure), a duplicate, or the
	// caller's own context ending.
	NATSError(op string)
}

// Dispatcher routes tasks through the tiers.
type Dispatcher struct {
	cfg Config
	log zerolog.Logger

	mu    sync.Mutex
	stats Stats
}

// Stats counts outcomes and fallbacks since start.
type Stats struct {
	Queued     int64            `json:"queued"`
	Busy       int64            `json:"busy"`
	Duplicates int64            `json:"duplicates"`
	Fixed      int64            `json:"fixed"`
	Local      int64            `json:"local"`
	Spooled    int64            `json:"spooled"`
	Failed     int64            `json:"failed"`
	Fallbacks  map[string]int64 `json:"fallbacks"` // "queue→fixed", "fixed→local", …
}

// New makes a Dispatcher.
func New(cfg Config) (*Dispatcher, error) {
	if cfg.Queue == nil {
		return nil, errors.New("dispatch: Queue (tier 1) is required")
	}
	if cfg.PublishTimeout <= 0 {
		cfg.PublishTimeout = 2 * time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 5 * time.Second}
	}
	return &Dispatcher{cfg: cfg, log: cfg.Logger.With().Str("component", "dispatch").Logger(),
		stats: Stats{Fallbacks: map[string]int64{}}}, nil
}

// Stats returns the counters.
func (d *Dispatcher) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	s.Fallbacks = make(map[string]int64, len(d.stats.Fallbacks))
	for k, v := range d.stats.Fallbacks {
		s.Fallbacks[k] = v
	}
	return s
}

func (d *Dispatcher) count(f func(*Stats)) {
	d.mu.Lock()
	f(&d.stats)
	d.mu.Unlock()
}

// ErrNoTier: every tier failed; the error wraps each tier's reason.
var ErrNoTier = errors.New("dispatch: no tier could take the task")

// Dispatch hands m to compute. A busy conversation is Outcome{Busy: true}
// with a nil error.
func (d *Dispatcher) Dispatch(ctx context.Context, m task.Message) (Outcome, error) {
	return d.DispatchUnless(ctx, m, nil)
}

// DispatchUnless is Dispatch for a caller still finding out whether m is
// a duplicate of a message already handled (the inbound path reads the
// task bucket beside the publish, not before it, so that the receipt
// waits for one JetStream round trip instead of two). dup (nil: never) is
// asked once the queue has turned the task down as unavailable, before
// anything else is tried: a duplicate is not spooled, nor run by a fixed
// worker or locally (a local Start would supersede the original's running
// attempt), and the outcome is Outcome{Duplicate: true}.
//
// What the queue accepted is not asked about. A duplicate the queue took
// (its msgid past the duplicate window, its conversation free) holds a
// task whose record is already finished: the worker that pulls it finds
// task.ErrFinished and removes it, so it costs a queue message, not an
// answer. The caller, which knows dup's answer, sends nothing for it.
func (d *Dispatcher) DispatchUnless(ctx context.Context, m task.Message, dup func() bool) (Outcome, error) {
	payload, err := schema.Marshal(m)
	if err != nil {
		return Outcome{}, err
	}
	log := d.log.With().Str("bot", m.Bot).Str("task", m.TaskID).Str("msgid", m.MsgID).Logger()
	if d.cfg.Spool != nil && d.cfg.Spool.Holds(m.Bot, m.Chat) {
		// The conversation's task waits in the spool: busy, as if it were
		// in the queue (the red line holds across an outage).
		d.count(func(s *Stats) { s.Busy++ })
		return Outcome{Busy: true}, nil
	}

	pctx, cancel := context.WithTimeout(ctx, d.cfg.PublishTimeout)
	res, err := d.cfg.Queue.PublishTask(pctx, m.Bot, m.Chat, m.MsgID, payload)
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: no ack within %s: %w", jetstream.ErrUnavailable, d.cfg.PublishTimeout, err)
	}
	switch {
	case err == nil && res.Duplicate:
		d.count(func(s *Stats) { s.Duplicates++ })
		return Outcome{Tier: TierQueue, Duplicate: true, Seq: res.Seq}, nil
	case err == nil:
		d.count(func(s *Stats) { s.Queued++ })
		return Outcome{Tier: TierQueue, Seq: res.Seq}, nil
	case errors.Is(err, jetstream.ErrConversationBusy):
		// The red line: an answer. Never another tier, never local.
		d.count(func(s *Stats) { s.Busy++ })
		return Outcome{Busy: true}, nil
	case !errors.Is(err, jetstream.ErrUnavailable):
		// Refused for good (ErrTaskRejected) or the caller gave up.
		if errors.Is(err, jetstream.ErrTaskRejected) {
			d.natsError("publish")
		}
		d.count(func(s *Stats) { s.Failed++ })
		return Outcome{}, err
	}
	d.natsError("publish")
	if dup != nil && dup() {
		d.count(func(s *Stats) { s.Duplicates++ })
		return Outcome{Duplicate: true}, nil
	}

	// The queue is unavailable: keep the task for it, then fall back.
	out := Outcome{}
	queueErr := err
	if d.cfg.Spool != nil {
		if serr := d.cfg.Spool.Keep(m, payload); serr != nil {
			log.Error().Err(serr).Msg("spool write failed")
		} else {
			out.Spooled = true
			d.count(func(s *Stats) { s.Spooled++ })
		}
	}
	errs := []error{fmt.Errorf("queue: %w", queueErr)}
	from := "queue"
	if d.cfg.FixedWorker != "" {
		d.fallback(log, from, "fixed", queueErr)
		ferr := d.fixed(ctx, payload)
		if ferr == nil {
			d.count(func(s *Stats) { s.Fixed++ })
			out.Tier = TierFixed
			return out, nil
		}
		errs = append(errs, redact.Error(fmt.Errorf("fixed worker %s: %w", d.cfg.FixedWorker, ferr)))
		queueErr, from = ferr, "fixed"
	}
	if d.cfg.Local != nil {
		d.fallback(log, from, "local", queueErr)
		lerr := d.cfg.Local.Start(m)
		if lerr == nil {
			d.count(func(s *Stats) { s.Local++ })
			out.Tier = TierLocal
			return out, nil
		}
		errs = append(errs, fmt.Errorf("local worker: %w", lerr))
	}
	if out.Spooled {
		// Nothing runs it now, but it is safe on disk and reaches the
		// queue when JetStream is back.
		log.Warn().Msg("no tier available; task spooled for the queue")
		return out, nil
	}
	d.count(func(s *Stats) { s.Failed++ })
	return out, fmt.Errorf("%w: %w", ErrNoTier, errors.Join(errs...))
}

func (d *Dispatcher) natsError(op string) {
	if d.cfg.Metrics != nil {
		d.cfg.Metrics.NATSError(op)
	}
}

func (d *Dispatcher) fallback(log zerolog.Logger, from, to string, reason error) {
	d.count(func(s *Stats) { s.Fallbacks[from+"→"+to]++ })
	log.Warn().Str("from", from).Str("to", to).AnErr("reason", reason).Msg("dispatch fallback")
}

// fixed posts the task to the fixed worker's exec API, which accepts it
// (202) and runs it in the background.
func (d *Dispatcher) fixed(ctx context.Context, payload []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.cfg.FixedWorker+ExecPath, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if d.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+d.cfg.Token)
	}
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusAccepted:
		return nil
	case http.StatusUnauthorized:
		return fmt.Errorf("exec API answered %s: this node's api.token_file does not hold the fixed worker's token", resp.Status)
	}
	// The API says why in {"error": …} (every slot busy, not bound to
	// JetStream yet): the fallback's log shows it.
	var why struct {
		Error string `json:"error"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 4<<10)).Decode(&why) == nil && why.Error != "" {
		return fmt.Errorf("exec API answered %s: %s", resp.Status, why.Error)
	}
	return fmt.Errorf("exec API answered %s", resp.Status)
}
