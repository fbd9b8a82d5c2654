// Package worker is a node's compute side: it pulls tasks from the
// JetStream work queue with bounded slots, runs them on an AI backend, and
// writes the accumulated answer to the output bucket, coalesced. Every
// step of a task goes through the task lifecycle (package task), which
// owns the record.
//
// A task's queue message is acked only when the task is finished
// (succeeded, canceled, or failed for good); the ack frees the
// conversation. While a task runs the message is kept alive with
// in-progress acks; a worker that dies mid-task stops sending them, the
// message is redelivered after the ack wait and another worker retries
// under the next attempt number. Attempts are fenced: an attempt that
// was taken over stops at its next write and leaves the message to the
// newer one. A task that fails on its last delivery, that is interrupted
// there by a shutdown, or that passes the execution Deadline, is failed
// for good with the reason and its message terminated: no conversation
// is left locked by a message nobody will run.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/task"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Config configures a worker. Zero values take the defaults named.
type Config struct {
	NodeID string
	// Slots is how many queue tasks this worker holds at once, running or
	// waiting for an AI concurrency token. An AI task is I/O-bound (it
	// waits on a model's stream), so slots are sized by memory, not CPU:
	// a running task holds about 44 KB of heap and stacks (goroutines,
	// coalescer, prompt, output writes; measured with the demo backend by
	// BenchmarkRunningTaskMemory, NATS's share included), up to twice
	// that in RSS under Go's default GOGC. Default DefaultSlots (1024):
	// about 45 MB in use, 90 MB RSS, per node when full. Raising it
	// costs memory only; lowering it makes tasks queue (the user sees
	// push.queued_line) while the model could take more. The sum over
	// all nodes must stay below the queue's TaskMaxRunning (65536).
	Slots int
	// LeaderSlots, if set, is how many slots to use while Leading reports
	// true: the access node keeps headroom for its connection and pusher.
	// Default 0: Slots (serve passes its own default, DefaultLeaderSlots).
	LeaderSlots int
	Leading     func() bool
	// AIConcurrency bounds how many tasks call the AI backend at once on
	// this node (what the model provider allows, divided among nodes).
	// A task waiting for a token is not started: its record stays queued
	// (the pusher shows push.queued_line) and its queue message is kept
	// alive with in-progress acks; the worker fetches no more tasks than
	// it has tokens free, so tasks it cannot run stay in the queue for
	// other nodes. Default 0: no limit beyond Slots.
	AIConcurrency int
	Backend       ai.Backend
	Store         *jetstream.Store
	// SystemPrompt is prepended to every request, if set.
	SystemPrompt string
	// OutputInterval is the least time between two output writes of one
	// task. Default 1s. The pusher shows a stream's progress at most every
	// few seconds (the per-conversation budget), so writing more often
	// only loads the output bucket and its watchers: at 5,000 concurrent
	// answers, 300ms meant 16,500 writes/s of which 9 in 10 were never
	// shown (bench/push.md). Lower it for snappier progress on few
	// conversations.
	OutputInterval time.Duration
	// ContextTurns and ContextBytes bound the conversation context kept
	// for multi-turn answers. Defaults 20 turns and 16 KiB.
	ContextTurns, ContextBytes int
	// RetryDelay is how long a failed attempt waits before redelivery.
	// Default 2s.
	RetryDelay time.Duration
	// Deadline bounds a task's execution, counted from its first attempt:
	// past it the task is failed, its conversation freed and the user
	// told, however many attempts remain. A few times the AI backend's
	// timeout (a slow answer may be retried once or twice). Default 30m.
	Deadline time.Duration
	// StorePatience is how long a finished answer's last write and the
	// record's "succeeded" are retried while JetStream does not confirm
	// them (a NATS server failing over takes seconds; a fallback tier
	// runs exactly while JetStream is in trouble). The answer is in hand:
	// failing it for a blip would cost the user a whole new attempt, or,
	// off the queue, the answer. Default 1m.
	StorePatience time.Duration
	// Lifecycle records every step of a task. Default: one on Store.
	Lifecycle *task.Lifecycle
	// NATSError, if set, is called with the operation each time a
	// JetStream request of the worker fails while it runs: its own queue
	// requests ("fetch" of tasks, "ack" confirmed of a finished task,
	// "remove", the removal that replaces an ack never confirmed, "hold",
	// the re-read of a task held off the queue), and a running task's
	// reads and writes of the store ("output_write", "record_write",
	// "record_read", "context_read", "context_write"), those only when
	// JetStream failed (task.StoreFailed), not when the lifecycle said no
	// (superseded, finished) or the task's run ended the request. For the
	// node's NATS error counter; must not block.
	NATSError func(op string)
	Logger    zerolog.Logger
	Now       func() time.Time
}

func (c *Config) setDefaults() {
	if c.Slots <= 0 {
		c.Slots = DefaultSlots
	}
	if c.OutputInterval <= 0 {
		c.OutputInterval = time.Second
	}
	if c.StorePatience <= 0 {
		c.StorePatience = time.Minute
	}
	if c.ContextTurns <= 0 {
		c.ContextTurns = 20
	}
	if c.ContextBytes <= 0 {
		c.ContextBytes = 16 << 10
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = 2 * time.Second
	}
	if c.Deadline <= 0 {
		c.Deadline = DefaultDeadline
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Worker pulls and runs tasks.
type Worker struct {
	cfg Config
	log zerolog.Logger

	mu      sync.Mutex
	running map[string]context.CancelCauseFunc // task id → cancel of its run
	held    int                                // slots in use: queue tasks fetched plus tasks started off the queue
	holding int                                // queue copies held while their task runs off the queue

	// tokens holds one value per task calling the AI backend (nil: no
	// limit); waiting counts queue tasks fetched and waiting for one, so
	// Run does not fetch tasks it could not start; tokenFreed wakes Run
	// when a token is given back.
	tokens     chan struct{}
	waiting    int // queue tasks waiting for a token
	waitingAll int // every task waiting for a token, fallback tiers too
	tokenFreed chan struct{}
}

// Defaults of Config's slots: worker.slots' and worker.leader_slots'.
const (
	DefaultSlots       = config.DefaultWorkerSlots
	DefaultLeaderSlots = config.DefaultLeaderSlots
)

// DefaultDeadline is Config.Deadline's default: three times the AI
// backends' default timeout of 10 minutes.
const DefaultDeadline = 30 * time.Minute

// cancelCheck is how often a running task's record is re-read, in case an
// announcement was missed (a reconnecting worker): a /stop whose
// announcement was lost stops the run within this (the user is told at
// once either way: the pusher reads the record), and a later attempt's
// takeover is also found by the fenced output writer at its next write.
// Each re-read of an R3 bucket is a JetStream API request to its leader:
// at 5 s, 3,000 running answers made 600 a second, more than the new
// messages' publishes (bench/ramp-r3.md).
const cancelCheck = 15 * time.Second

// New validates cfg.
func New(cfg Config) (*Worker, error) {
	cfg.setDefaults()
	switch {
	case cfg.NodeID == "":
		return nil, errors.New("worker: NodeID is required")
	case cfg.Backend == nil:
		return nil, errors.New("worker: Backend is required (--ai demo|exec|openai)")
	case cfg.Store == nil:
		return nil, errors.New("worker: Store is required")
	case cfg.AIConcurrency < 0:
		return nil, fmt.Errorf("worker: AIConcurrency %d: must be 0 (no limit) or more", cfg.AIConcurrency)
	}
	if cfg.Lifecycle == nil {
		cfg.Lifecycle = task.NewLifecycle(cfg.Store, cfg.NodeID, cfg.Logger).WithClock(cfg.Now)
	}
	w := &Worker{cfg: cfg, running: map[string]context.CancelCauseFunc{}, tokenFreed: make(chan struct{}, 1),
		log: cfg.Logger.With().Str("node", cfg.NodeID).Str("component", "worker").Logger()}
	if cfg.AIConcurrency > 0 {
		w.tokens = make(chan struct{}, cfg.AIConcurrency)
	}
	return w, nil
}

// Busy is how many tasks this worker is running now.
func (w *Worker) Busy() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

// Holding is how many queue copies of tasks running off the queue this
// worker holds now (see hold).
func (w *Worker) Holding() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.holding
}

// InAI is how many tasks hold an AI concurrency token now (0 without a
// limit).
func (w *Worker) InAI() int {
	if w.tokens == nil {
		return 0
	}
	return len(w.tokens)
}

// Waiting is how many tasks wait for an AI concurrency token now: taken
// from the queue (or given by a fallback tier) but not started.
func (w *Worker) Waiting() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waitingAll
}

func (w *Worker) slots() int {
	if w.cfg.Leading != nil && w.cfg.LeaderSlots > 0 && w.cfg.Leading() {
		return min(w.cfg.LeaderSlots, w.cfg.Slots)
	}
	return w.cfg.Slots
}

// freeTokens is how many more queue tasks could start now: tokens neither
// held nor promised to a fetched task waiting for one.
func (w *Worker) freeTokens() int {
	if w.tokens == nil {
		return int(^uint(0) >> 1)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return cap(w.tokens) - len(w.tokens) - w.waiting
}

// reserve promises a token to a queue task Run has just fetched, so that
// the next fetch does not count it free; the task's acquire (or, if it
// never gets that far, unreserve) takes the promise back.
func (w *Worker) reserve() {
	if w.tokens != nil {
		w.mu.Lock()
		w.waiting++
		w.mu.Unlock()
	}
}

func (w *Worker) unreserve() {
	if w.tokens != nil {
		w.mu.Lock()
		w.waiting--
		w.mu.Unlock()
	}
}

// acquire takes an AI concurrency token, waiting while none is free;
// queued says the caller is a fetched queue task, which holds a reserve
// until then. It fails only when ctx ends. release gives the token back.
func (w *Worker) acquire(ctx context.Context, queued bool) (release func(), err error) {
	if w.tokens == nil {
		return func() {}, nil
	}
	w.mu.Lock()
	w.waitingAll++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.waitingAll--
		w.mu.Unlock()
		if queued {
			w.unreserve()
		}
	}()
	select {
	case w.tokens <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return func() {
		<-w.tokens
		select {
		case w.tokenFreed <- struct{}{}:
		default:
		}
	}, nil
}

// Run pulls tasks until ctx ends, then waits for running tasks to stop.
// Tasks interrupted by shutdown are not acked: another worker gets them
// after the ack wait (or at once, when this one naks them on the way out).
func (w *Worker) Run(ctx context.Context) error {
	var (
		wg    sync.WaitGroup
		freed = make(chan struct{}, 1)
		// fetched closes when no pull request of this worker is open on
		// the server any more. A task handed back (nak'd) before that
		// would be delivered into a request nobody reads and sit there
		// until its ack wait: shutdown's naks wait for it.
		fetched = make(chan struct{})
		late    []natsjs.Msg // delivered after the stop began: handed back untouched
	)
	defer wg.Wait()
	defer func() {
		close(fetched)
		for _, msg := range late {
			msg.Nak()
		}
	}()
	sub, err := w.cfg.Store.JetStream().Conn().Subscribe(task.CancelSubjects, func(m *nats.Msg) {
		id, ok := task.CanceledTask(m.Subject)
		if !ok {
			return
		}
		w.mu.Lock()
		cancel := w.running[id]
		w.mu.Unlock()
		if cancel != nil {
			cancel(errCanceled)
		}
	})
	if err != nil {
		return fmt.Errorf("worker: subscribe to cancellations: %w", err)
	}
	defer sub.Unsubscribe()
	cons := w.cfg.Store.Workers()
	for ctx.Err() == nil {
		w.mu.Lock()
		held := w.held
		w.mu.Unlock()
		free := min(w.slots()-held, w.freeTokens())
		if free <= 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-freed:
			case <-w.tokenFreed:
			case <-time.After(time.Second): // slots may have grown (leadership ended)
			}
			continue
		}
		batch, err := cons.Fetch(free, natsjs.FetchMaxWait(2*time.Second))
		if err != nil {
			if ctx.Err() == nil {
				w.natsError("fetch")
				w.log.Warn().Err(err).Msg("fetch tasks failed; retrying")
				pause.For(ctx, time.Second)
			}
			continue
		}
		for msg := range batch.Messages() {
			if ctx.Err() != nil {
				late = append(late, msg)
				continue
			}
			w.mu.Lock()
			w.held++
			w.mu.Unlock()
			w.reserve()
			wg.Go(func() {
				defer func() {
					w.mu.Lock()
					w.held--
					w.mu.Unlock()
					select {
					case freed <- struct{}{}:
					default:
					}
				}()
				w.handle(ctx, msg, fetched)
			})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, natsjs.ErrNoMessages) && ctx.Err() == nil {
			w.log.Debug().Err(err).Msg("fetch ended with an error")
		}
	}
	return nil
}

// handle runs one queue message to its end: acked when the task needs
// nothing more, nak'd for another attempt, terminated when it can never
// run again, left alone when a later attempt holds it.
func (w *Worker) handle(ctx context.Context, msg natsjs.Msg, fetched <-chan struct{}) {
	var m task.Message
	if err := json.Unmarshal(msg.Data(), &m); err != nil || m.TaskID == "" {
		w.unreserve()
		w.log.Error().Err(err).Str("subject", msg.Subject()).Msg("unreadable task message; terminating it")
		w.cfg.Store.GiveUp(context.WithoutCancel(ctx), msg, "unreadable task message")
		return
	}
	deliveries := 1
	if meta, err := msg.Metadata(); err == nil {
		deliveries = int(meta.NumDelivered)
	}
	log := w.log.With().Str("task", m.TaskID).Str("bot", m.Bot).Int("delivery", deliveries).Logger()

	stopAlive := keepAlive(ctx, msg, w.cfg.Store.Options().TaskAckWait/3)
	res := w.execute(ctx, m, "queue", deliveries, w.cfg.Store.FinalDelivery(msg))
	for res.action == actHold {
		if res = w.hold(ctx, m, log, res.err); res.action == actRun {
			w.reserve() // execute's acquire takes it back
			res = w.execute(ctx, m, "queue", deliveries, w.cfg.Store.FinalDelivery(msg))
		}
	}
	stopAlive()

	bg := context.WithoutCancel(ctx)
	switch res.action {
	case actAck:
		w.ack(ctx, msg, log)
	case actRetry:
		if ctx.Err() != nil {
			<-fetched
			if err := msg.Nak(); err != nil { // shutting down: hand it back now, not after the ack wait
				log.Warn().Err(err).Msg("nak failed; the task is redelivered after the ack wait")
			}
		} else {
			log.Warn().Err(res.err).Dur("retry_in", w.cfg.RetryDelay).Msg("attempt failed; will retry")
			msg.NakWithDelay(w.cfg.RetryDelay)
		}
	case actGiveUp:
		if err := w.cfg.Store.GiveUp(bg, msg, res.err.Error()); err != nil {
			log.Warn().Err(err).Msg("queue message not removed; the sweep removes it")
		}
	case actLeave:
		log.Info().Err(res.err).Msg("a later attempt holds the task; leaving its message alone")
	}
}

// ack removes a finished task's message from the queue, which frees its
// conversation, and makes sure of it. A plain ack is fire-and-forget: one
// lost while the consumer's leader moves (a NATS server restarting) left
// the message in the queue and the conversation refusing new questions
// as busy until a redelivery or the sweep, a minute or more (chaos
// rolling-nats-restart). So the ack is one the server confirms, retried
// for StorePatience; if none is confirmed the message is deleted by its
// sequence, and if that fails too the sweep removes it.
// A node stopping ends the retries (ctx), not the last tries.
func (w *Worker) ack(ctx context.Context, msg natsjs.Msg, log zerolog.Logger) {
	bg := context.WithoutCancel(ctx)
	err := w.patiently(ctx, log, "ack the finished task's queue message", func() error {
		actx, cancel := context.WithTimeout(bg, ackTimeout)
		defer cancel()
		if err := msg.DoubleAck(actx); err != nil && !errors.Is(err, natsjs.ErrMsgAlreadyAckd) {
			w.natsError("ack")
			return err
		}
		return nil
	})
	if err == nil {
		return
	}
	meta, merr := msg.Metadata()
	if merr == nil {
		rctx, cancel := context.WithTimeout(bg, ackTimeout)
		merr = w.cfg.Store.RemoveTask(rctx, meta.Sequence.Stream)
		cancel()
		if merr != nil {
			w.natsError("remove")
		}
	}
	if merr != nil {
		log.Warn().Err(err).AnErr("remove", merr).Msg("finished task's queue message neither acked nor removed; the sweep removes it")
	}
}

// hold keeps a queue message whose task runs off the queue, and alive:
// a fallback tier (the leader's own worker, a fixed worker) started it
// while JetStream was away, and once JetStream was back the spool
// forwarded its copy to the queue, so that the conversation stays taken
// (the queue is the conversation's mutex) for as long as the answer runs.
// The worker keeps the message (in-progress acks, no AI token) until the
// task ends, then acks it, which frees the conversation; or, when the
// attempt goes silent (task.Lifecycle.WithOffQueueSilence: its node died
// with it), returns actRun, and the task runs here.
func (w *Worker) hold(ctx context.Context, m task.Message, log zerolog.Logger, why error) result {
	log.Info().Err(why).Msg("task runs off the queue; holding its queue copy until it ends")
	w.mu.Lock()
	w.holding++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.holding--
		w.mu.Unlock()
	}()
	for {
		pause.For(ctx, offQueuePoll)
		if ctx.Err() != nil {
			return result{action: actRetry, err: ctx.Err()} // handed back: the next worker holds it
		}
		rctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
		r, alive, err := w.cfg.Lifecycle.OffQueue(rctx, m.TaskID)
		cancel()
		switch {
		case err != nil:
			w.natsError("hold")
			log.Debug().Err(err).Msg("held task's record not read; still holding")
		case r.Exec.Finished():
			log.Info().Str("exec", string(r.Exec)).Msg("task ended off the queue; acking its queue copy")
			return result{action: actAck}
		case !alive:
			log.Warn().Int("attempt", r.Attempt).Str("on", r.Node).Str("exec", string(r.Exec)).
				Msg("the attempt off the queue has ended or gone silent; running the task here")
			return result{action: actRun}
		}
	}
}

// offQueuePoll is how often a held queue copy re-reads its task.
const offQueuePoll = 2 * time.Second

func (w *Worker) natsError(op string) {
	if w.cfg.NATSError != nil {
		w.cfg.NATSError(op)
	}
}

// storeError tells Config.NATSError about err, from op on the store, if it
// is JetStream failing (task.StoreFailed).
func (w *Worker) storeError(op string, err error) {
	if task.StoreFailed(err) {
		w.natsError(op)
	}
}

// storeCallTimeout bounds one JetStream call made under a task's run
// context. That context carries the execution deadline (30 minutes by
// default), which replaces nats.go's own 5 s request timeout: a request
// whose reply was lost with a NATS server that died under it waited that
// long. In chaos rolling-nats-restart, tasks on the local tier sat
// "running" with no output, their prompt's context read never answered.
const storeCallTimeout = 10 * time.Second

// ackTimeout bounds one confirmed ack.
const ackTimeout = 5 * time.Second

// action is what becomes of a queue message after an attempt.
type action int

const (
	actAck    action = iota // the task needs nothing more from the queue
	actRetry                // the record is queued again: nak for another attempt
	actGiveUp               // the record is failed for good: terminate the message
	actLeave                // superseded: a later attempt holds the message
	actHold                 // the task runs off the queue: hold the message until it ends
	actRun                  // (hold) run the task now
)

type result struct {
	action action
	err    error
}

// Execute runs a task once off the queue, on a fallback tier (a fixed
// worker's exec API, the leader's own worker): there is no redelivery, so
// a failure is final and recorded, and the user told. It holds a slot
// while it runs, or returns ErrNoSlot at once when none is free.
func (w *Worker) Execute(ctx context.Context, m task.Message, tier string) error {
	release, err := w.takeSlot()
	if err != nil {
		return err
	}
	defer release()
	return w.execute(ctx, m, tier, 0, true).err
}

// Go is Execute on a goroutine that wg tracks: the slot is taken (or
// ErrNoSlot returned) before Go returns, so a caller that answers "accepted"
// never accepts more than the slots.
func (w *Worker) Go(ctx context.Context, m task.Message, tier string, wg *sync.WaitGroup) error {
	release, err := w.takeSlot()
	if err != nil {
		return err
	}
	wg.Go(func() {
		defer release()
		w.execute(ctx, m, tier, 0, true)
	})
	return nil
}

// ErrNoSlot: every slot of the worker is in use; the task was not started.
var ErrNoSlot = errors.New("worker: every slot is busy")

// takeSlot holds one slot for a task off the queue (the fetch loop counts it).
func (w *Worker) takeSlot() (release func(), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held >= w.slots() {
		return nil, fmt.Errorf("%w (%d of %d)", ErrNoSlot, w.held, w.slots())
	}
	w.held++
	return func() {
		w.mu.Lock()
		w.held--
		w.mu.Unlock()
	}, nil
}

// execute runs one attempt of a task and records how it ended. final says
// no other attempt will follow if this one fails (the queue's last
// delivery, or a fallback tier).
func (w *Worker) execute(ctx context.Context, m task.Message, tier string, deliveries int, final bool) result {
	lc := w.cfg.Lifecycle
	log := w.log.With().Str("task", m.TaskID).Str("bot", m.Bot).Logger()
	bg := context.WithoutCancel(ctx)

	// The AI concurrency token is taken before the task starts: while it
	// waits the record stays queued (the user is told so) and handle's
	// in-progress acks keep the queue message.
	release, err := w.acquire(ctx, deliveries > 0)
	if err != nil {
		if final { // no attempt follows: end the task rather than lock its conversation
			why := "the node stopped while the task waited for an AI concurrency token on its last delivery"
			_, gerr := lc.GiveUp(bg, m.TaskID, why, nil)
			w.storeError("record_write", gerr)
			log.Warn().Msg(why)
			if deliveries == 0 { // a fallback tier: no queue message
				return result{action: actAck, err: errors.New(why)}
			}
			return result{action: actGiveUp, err: errors.New(why)}
		}
		return result{action: actRetry, err: err}
	}
	defer release()

	attempt, rec, err := lc.Start(ctx, m, tier, deliveries)
	switch {
	case errors.Is(err, task.ErrFinished):
		log.Info().Err(err).Msg("task already finished; skipping")
		return result{action: actAck}
	case errors.Is(err, task.ErrRunningOffQueue):
		return result{action: actHold, err: err}
	case err != nil:
		w.storeError("record_write", err)
		return result{action: actRetry, err: err}
	}
	log = log.With().Int("attempt", attempt).Logger()

	// /stop (or an operator's cancel) marks the record canceled and
	// announces it; the record is re-read now and then in case the
	// announcement was missed. The execution deadline counts from the
	// first attempt.
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	runCtx, cancelDeadline := context.WithDeadlineCause(runCtx, rec.Started.Add(w.cfg.Deadline), errDeadline)
	defer cancelDeadline()
	w.mu.Lock()
	w.running[m.TaskID] = cancel
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.running, m.TaskID)
		w.mu.Unlock()
	}()
	stopCheck := checkCancel(runCtx, lc, m.TaskID, attempt, cancel, w.storeError)
	defer stopCheck()

	req := ai.Request{TaskID: m.TaskID, Messages: w.prompt(runCtx, m)}
	out := newCoalescer(runCtx, lc.Output(m.TaskID, m.Bot, attempt), w.cfg.OutputInterval, func(err error) {
		w.storeError("output_write", err)
		if errors.Is(err, task.ErrSuperseded) {
			cancel(errSuperseded)
		}
	})
	err = w.cfg.Backend.Stream(runCtx, req, out.add)
	out.end()
	text := out.text()

	cause := context.Cause(runCtx)
	switch {
	case errors.Is(cause, errCanceled):
		out.flush(bg) // what came before the stop stays on the user's screen
		log.Info().Msg("task canceled")
		return result{action: actAck}
	case errors.Is(cause, errSuperseded):
		return result{action: actLeave, err: task.ErrSuperseded}
	case errors.Is(cause, errDeadline):
		out.flush(bg)
		why := fmt.Sprintf("execution deadline %s passed without an answer", w.cfg.Deadline)
		_, gerr := lc.GiveUp(bg, m.TaskID, why, nil)
		w.storeError("record_write", gerr)
		log.Warn().Msg(why)
		return result{action: actGiveUp, err: errors.New(why)}
	case err != nil && ctx.Err() != nil:
		out.flush(bg)
		if final {
			why := "the node stopped during the task's last attempt"
			return w.failed(bg, m, attempt, why, false)
		}
		return w.failed(bg, m, attempt, "interrupted: the node is stopping", true)
	case err != nil:
		out.flush(bg)
		retry := !errors.Is(err, ai.ErrBadRequest) && !final
		why := fmt.Sprintf("backend %s: %v", w.cfg.Backend.Name(), err)
		if final && !errors.Is(err, ai.ErrBadRequest) {
			why = "last attempt failed: " + why
		}
		return w.failed(bg, m, attempt, why, retry)
	}
	// The complete text is stored under this attempt before the record
	// says succeeded: the pusher delivers exactly what Finish hashed.
	if err := w.patiently(ctx, log, "store the answer", func() error { return out.flush(bg) }); err != nil {
		if errors.Is(err, task.ErrSuperseded) {
			return result{action: actLeave, err: err}
		}
		return w.failed(bg, m, attempt, "answer not stored: "+err.Error(), !final)
	}
	var done *task.Record
	err = w.patiently(ctx, log, "record the task succeeded", func() (err error) {
		done, err = lc.Finish(bg, m.TaskID, attempt, text)
		w.storeError("record_write", err)
		return err
	})
	switch {
	case errors.Is(err, task.ErrSuperseded):
		return result{action: actLeave, err: err}
	case errors.Is(err, task.ErrFinished):
		return result{action: actAck} // canceled or given up meanwhile: that stands
	case err != nil:
		return result{action: actRetry, err: err}
	}
	if deliveries == 0 {
		lc.FreeConversation(bg, done, "finished on tier "+tier)
	}
	// Only the attempt that finished the task adds its turn: once.
	key := jetstream.ConversationKey(m.Bot, m.Chat)
	if err := task.AppendExchange(bg, w.cfg.Store.Context(), key, m.Question, text, w.cfg.ContextTurns, w.cfg.ContextBytes); err != nil {
		w.storeError("context_write", err)
		log.Warn().Err(err).Msg("conversation context not updated")
	}
	log.Info().Int("bytes", len(text)).Msg("task succeeded")
	return result{action: actAck}
}

// patiently runs fn until it succeeds, fails for good (the attempt was
// superseded, the task finished meanwhile), or StorePatience has passed
// since the first failure, or ctx ends (the node stops: the queue, or the
// sweep, takes it from there); it returns fn's last error.
func (w *Worker) patiently(ctx context.Context, log zerolog.Logger, what string, fn func() error) error {
	settled := func(err error) bool {
		return err == nil || errors.Is(err, task.ErrSuperseded) || errors.Is(err, task.ErrFinished)
	}
	err := fn()
	if settled(err) {
		return err
	}
	log.Warn().Err(err).Dur("patience", w.cfg.StorePatience).Msgf("could not %s; retrying while JetStream recovers", what)
	until := time.Now().Add(w.cfg.StorePatience)
	for wait := 250 * time.Millisecond; time.Now().Before(until); wait = min(2*wait, 5*time.Second) {
		pause.For(ctx, min(wait, time.Until(until)))
		if ctx.Err() != nil {
			return err
		}
		if err = fn(); settled(err) {
			if err == nil {
				log.Info().Msgf("%s: done after retrying", what)
			}
			return err
		}
	}
	return err
}

// failed records attempt's failure and says what becomes of the message.
func (w *Worker) failed(ctx context.Context, m task.Message, attempt int, why string, retry bool) result {
	_, err := w.cfg.Lifecycle.Fail(ctx, m.TaskID, attempt, why, retry)
	w.storeError("record_write", err)
	switch {
	case errors.Is(err, task.ErrSuperseded):
		return result{action: actLeave, err: err}
	case errors.Is(err, task.ErrFinished):
		return result{action: actAck}
	case err != nil && retry:
		return result{action: actRetry, err: err}
	case err != nil:
		// Not recorded: let the queue deliver it again (or the sweep end it).
		return result{action: actRetry, err: fmt.Errorf("%s; and not recorded: %w", why, err)}
	case retry:
		return result{action: actRetry, err: errors.New(why)}
	}
	w.log.Error().Str("task", m.TaskID).Str("reason", why).Msg("task failed")
	return result{action: actGiveUp, err: errors.New(why)}
}

func (w *Worker) prompt(ctx context.Context, m task.Message) []ai.Message {
	var msgs []ai.Message
	if w.cfg.SystemPrompt != "" {
		msgs = append(msgs, ai.Message{Role: "system", Content: w.cfg.SystemPrompt})
	}
	lctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	conv, _, err := task.LoadConversation(lctx, w.cfg.Store.Context(), jetstream.ConversationKey(m.Bot, m.Chat))
	if ctx.Err() == nil {
		w.storeError("context_read", err)
	}
	if err == nil {
		for _, t := range conv.Turns {
			msgs = append(msgs, ai.Message{Role: t.Role, Content: t.Content})
		}
	}
	return append(msgs, ai.Message{Role: "user", Content: m.Question})
}

// Causes that end a run early.
var (
	errCanceled   = errors.New("task canceled")
	errSuperseded = errors.New("task taken over by a later attempt")
	errDeadline   = errors.New("task execution deadline passed")
)

// checkCancel re-reads the record every cancelCheck and ends the run once
// it says canceled (or finished otherwise: given up), or that a later
// attempt took over.
func checkCancel(ctx context.Context, lc *task.Lifecycle, id string, attempt int, cancel context.CancelCauseFunc,
	storeError func(op string, err error)) (stop func()) {
	return every(ctx, cancelCheck, func(ctx context.Context) bool {
		gctx, gcancel := context.WithTimeout(ctx, storeCallTimeout)
		r, err := lc.Get(gctx, id)
		gcancel()
		switch {
		case err != nil:
			if ctx.Err() == nil { // not the run ending under the read
				storeError("record_read", err)
			}
			return true
		case r.Exec.Finished():
			cancel(errCanceled)
			return false
		case r.Attempt != attempt:
			cancel(errSuperseded)
			return false
		}
		return true
	})
}

// keepAlive sends in-progress acks every period until stopped.
func keepAlive(ctx context.Context, msg natsjs.Msg, period time.Duration) (stop func()) {
	if period <= 0 {
		period = 10 * time.Second
	}
	return every(ctx, period, func(context.Context) bool { msg.InProgress(); return true })
}

// every runs fn each period on its own goroutine until fn returns false,
// ctx ends, or stop is called; stop returns once the goroutine has ended.
func every(ctx context.Context, period time.Duration, fn func(context.Context) bool) (stop func()) {
	ectx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ectx.Done():
				return
			case <-t.C:
				if !fn(ectx) {
					return
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// coalescer accumulates deltas and writes the whole text at most once per
// interval (and only if it changed), so a backend emitting hundreds of
// tokens a second costs a few KV writes, and a backend that goes quiet
// still has its last words written within an interval. Writes go through
// the attempt's fenced writer; onErr hears of each failed write, periodic
// or the last (ErrSuperseded ends the run), but not of a periodic write
// the run's end cut short.
type coalescer struct {
	w     *task.OutputWriter
	onErr func(error)

	mu    sync.Mutex
	b     strings.Builder
	dirty bool
	wmu   sync.Mutex // one write at a time, in order

	stop func()
}

func newCoalescer(ctx context.Context, w *task.OutputWriter, interval time.Duration, onErr func(error)) *coalescer {
	c := &coalescer{w: w, onErr: onErr}
	c.stop = every(ctx, interval, func(ctx context.Context) bool {
		wctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
		defer cancel()
		if err := c.write(wctx); err != nil && ctx.Err() == nil {
			c.onErr(err)
		}
		return true
	})
	return c
}

func (c *coalescer) add(delta string) error {
	c.mu.Lock()
	c.b.WriteString(delta)
	c.dirty = true
	c.mu.Unlock()
	return nil
}

func (c *coalescer) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// flush writes the text if it changed since the last write; onErr hears
// of a failure.
func (c *coalescer) flush(ctx context.Context) error {
	err := c.write(ctx)
	if err != nil {
		c.onErr(err)
	}
	return err
}

// write writes the text if it changed since the last write.
func (c *coalescer) write(ctx context.Context) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if !c.dirty {
		c.mu.Unlock()
		return nil
	}
	text := c.b.String()
	c.dirty = false
	c.mu.Unlock()
	if err := c.w.Write(ctx, text); err != nil {
		c.mu.Lock()
		c.dirty = true
		c.mu.Unlock()
		return err
	}
	return nil
}

// end stops the periodic writes; then flush writes the last.
func (c *coalescer) end() { c.stop() }
