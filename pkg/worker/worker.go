// Package worker is a node's compute side: it pulls tasks from the
// JetStream work queue with bounded slots, runs them on an AI backend, and
// writes the accumulated answer to the output bucket, coalesced.
//
// A task's queue message is acked only when the task is finished
// (succeeded, canceled, or failed for good); the ack frees the
// conversation. While a task runs the message is kept alive with
// in-progress acks; a worker that dies mid-task stops sending them, the
// message is redelivered after the ack wait and another worker retries,
// the attempt counted in the task record. A task that keeps failing is
// terminated at its last delivery (it would otherwise lock its
// conversation for good) and recorded as failed, with the reason.
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
	"github.com/botctl/botctl/pkg/task"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Config configures a worker. Zero values take the defaults named.
type Config struct {
	NodeID string
	// Slots is how many tasks run at once. Default 8.
	Slots int
	// LeaderSlots, if set, is how many slots to use while Leading reports
	// true: the access node keeps headroom for its connection and pusher.
	LeaderSlots int
	Leading     func() bool
	Backend     ai.Backend
	Store       *jetstream.Store
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
	Logger     zerolog.Logger
	Now        func() time.Time
}

func (c *Config) setDefaults() {
	if c.Slots <= 0 {
		c.Slots = 8
	}
	if c.OutputInterval <= 0 {
		c.OutputInterval = time.Second
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
}

// CancelSubject is where a task's cancellation is announced (core NATS,
// no storage): every worker listens, and the one running it stops at once.
// The record says canceled too; the announcement only makes it immediate.
func CancelSubject(taskID string) string { return "botctl.cancel." + taskID }

// Cancel announces that taskID was canceled (its record must already say
// so): the worker running it stops within moments.
func Cancel(nc *nats.Conn, taskID string) error { return nc.Publish(CancelSubject(taskID), nil) }

// cancelCheck is how often a running task's record is re-read, in case an
// announcement was missed (a reconnecting worker).
const cancelCheck = 5 * time.Second

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
	}
	return &Worker{cfg: cfg, running: map[string]context.CancelCauseFunc{},
		log: cfg.Logger.With().Str("node", cfg.NodeID).Str("component", "worker").Logger()}, nil
}

func (w *Worker) slots() int {
	if w.cfg.Leading != nil && w.cfg.LeaderSlots > 0 && w.cfg.Leading() {
		return min(w.cfg.LeaderSlots, w.cfg.Slots)
	}
	return w.cfg.Slots
}

// Run pulls tasks until ctx ends, then waits for running tasks to stop.
// Tasks interrupted by shutdown are not acked: another worker gets them
// after the ack wait (or at once, when this one naks them on the way out).
func (w *Worker) Run(ctx context.Context) error {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		running int
		freed   = make(chan struct{}, 1)
	)
	defer wg.Wait()
	sub, err := w.cfg.Store.JetStream().Conn().Subscribe(CancelSubject("*"), func(m *nats.Msg) {
		id := strings.TrimPrefix(m.Subject, CancelSubject(""))
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
		mu.Lock()
		free := w.slots() - running
		mu.Unlock()
		if free <= 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-freed:
			case <-time.After(time.Second): // slots may have grown (leadership ended)
			}
			continue
		}
		batch, err := cons.Fetch(free, natsjs.FetchMaxWait(2*time.Second))
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn().Err(err).Msg("fetch tasks failed; retrying")
				sleep(ctx, time.Second)
			}
			continue
		}
		for msg := range batch.Messages() {
			mu.Lock()
			running++
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					mu.Lock()
					running--
					mu.Unlock()
					select {
					case freed <- struct{}{}:
					default:
					}
				}()
				w.handle(ctx, msg)
			})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, natsjs.ErrNoMessages) && ctx.Err() == nil {
			w.log.Debug().Err(err).Msg("fetch ended with an error")
		}
	}
	return nil
}

// handle runs one queue message to its end.
func (w *Worker) handle(ctx context.Context, msg natsjs.Msg) {
	var m task.Message
	if err := json.Unmarshal(msg.Data(), &m); err != nil || m.TaskID == "" {
		w.log.Error().Err(err).Str("subject", msg.Subject()).Msg("unreadable task message; terminating it")
		w.cfg.Store.GiveUp(context.WithoutCancel(ctx), msg, "unreadable task message")
		return
	}
	meta, err := msg.Metadata()
	attempt, maxDeliver := 1, w.cfg.Store.Options().TaskMaxDeliver
	if err == nil {
		attempt = int(meta.NumDelivered)
	}
	log := w.log.With().Str("task", m.TaskID).Str("bot", m.Bot).Int("attempt", attempt).Logger()

	stopAlive := keepAlive(ctx, msg, w.cfg.Store.Options().TaskAckWait/3)
	outcome := w.Execute(ctx, m, attempt, "queue")
	stopAlive()

	bg := context.WithoutCancel(ctx)
	switch {
	case outcome.Err == nil:
		if err := msg.Ack(); err != nil {
			log.Warn().Err(err).Msg("ack failed; the task may be redelivered (its record says it is done, so it will be skipped)")
		}
	case ctx.Err() != nil:
		// Shutting down: hand the task back now instead of after the ack wait.
		msg.Nak()
	case !outcome.Retry || (maxDeliver > 0 && attempt >= maxDeliver):
		reason := outcome.Err.Error()
		if outcome.Retry {
			reason = fmt.Sprintf("gave up after %d attempts: %s", attempt, reason)
		}
		w.fail(bg, m.TaskID, reason)
		w.cfg.Store.GiveUp(bg, msg, reason)
	default:
		log.Warn().Err(outcome.Err).Dur("retry_in", w.cfg.RetryDelay).Msg("attempt failed; will retry")
		msg.NakWithDelay(w.cfg.RetryDelay)
	}
}

// Result is how one execution of a task ended. A nil Err means the task
// needs nothing more from this worker: succeeded, canceled, or already
// finished elsewhere. Retry says whether another attempt could help.
type Result struct {
	Err   error
	Retry bool
}

// Execute runs a task once: the path shared by the queue and by the
// fallback tiers (a fixed worker's exec API, the leader's own worker).
func (w *Worker) Execute(ctx context.Context, m task.Message, attempt int, tier string) Result {
	tasks, outKV := w.cfg.Store.Tasks(), w.cfg.Store.Output()
	log := w.log.With().Str("task", m.TaskID).Str("bot", m.Bot).Int("attempt", attempt).Logger()

	// The record may not have landed yet (the leader persists it right
	// after the publish): create it from the message's raw context.
	if _, err := task.Create(ctx, tasks, task.RecordOf(m)); err == nil {
		if err := w.cfg.Store.MarkPending(ctx, m.Bot, m.TaskID); err != nil {
			return Result{Err: err, Retry: true}
		}
	} else if !errors.Is(err, natsjs.ErrKeyExists) {
		return Result{Err: err, Retry: true}
	}
	var skip string
	rec, err := task.Update(ctx, tasks, m.TaskID, func(r *task.Record) error {
		if r.Exec.Finished() {
			skip = string(r.Exec)
			return task.ErrNoChange
		}
		r.Attempt, r.Node, r.Error = attempt, w.cfg.NodeID, ""
		if r.Tier == "" {
			r.Tier = tier
		}
		return r.SetExec(task.Running, fmt.Sprintf("attempt %d on %s (tier %s)", attempt, w.cfg.NodeID, tier), w.cfg.NodeID, w.cfg.Now().UTC())
	})
	if err != nil {
		return Result{Err: err, Retry: true}
	}
	if skip != "" {
		log.Info().Str("exec", skip).Msg("task already finished; skipping")
		return Result{}
	}

	// /stop (or an operator's cancel) marks the record canceled and
	// announces it; the record is re-read now and then in case the
	// announcement was missed.
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w.mu.Lock()
	w.running[m.TaskID] = cancel
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.running, m.TaskID)
		w.mu.Unlock()
	}()
	stopCheck := checkCancel(runCtx, tasks, m.TaskID, cancel)
	defer stopCheck()

	req := ai.Request{TaskID: m.TaskID, Messages: w.prompt(runCtx, m, rec)}
	out := newCoalescer(runCtx, outKV, task.Output{TaskID: m.TaskID, Bot: m.Bot, Attempt: attempt}, w.cfg.OutputInterval, w.cfg.Now)
	err = w.cfg.Backend.Stream(runCtx, req, out.add)
	out.end()
	text := out.text()

	bg := context.WithoutCancel(ctx)
	now := w.cfg.Now().UTC()
	switch {
	case errors.Is(context.Cause(runCtx), errCanceled):
		out.finish(bg, func(o *task.Output) { o.Done, o.Canceled = true, true })
		log.Info().Msg("task canceled")
		return Result{}
	case err != nil && ctx.Err() != nil:
		out.flush(bg)
		return Result{Err: ctx.Err(), Retry: true}
	case err != nil:
		out.flush(bg)
		task.Update(bg, tasks, m.TaskID, func(r *task.Record) error { r.Error = err.Error(); return nil })
		return Result{Err: fmt.Errorf("backend %s: %w", w.cfg.Backend.Name(), err), Retry: !errors.Is(err, ai.ErrBadRequest)}
	}
	if err := out.finish(bg, func(o *task.Output) { o.Done = true }); err != nil {
		return Result{Err: err, Retry: true}
	}
	if _, err := task.Update(bg, tasks, m.TaskID, func(r *task.Record) error {
		if r.Exec != task.Running {
			return task.ErrNoChange // canceled meanwhile: the answer is still in the output
		}
		return r.SetExec(task.Succeeded, fmt.Sprintf("answer complete, %d bytes", len(text)), w.cfg.NodeID, now)
	}); err != nil {
		return Result{Err: err, Retry: true}
	}
	key := jetstream.ConversationKey(m.Bot, m.Chat)
	if err := task.AppendExchange(bg, w.cfg.Store.Context(), key, m.Question, text, w.cfg.ContextTurns, w.cfg.ContextBytes); err != nil {
		log.Warn().Err(err).Msg("conversation context not updated")
	}
	log.Info().Int("bytes", len(text)).Msg("task succeeded")
	return Result{}
}

// fail records a task as failed for good.
func (w *Worker) fail(ctx context.Context, id, reason string) {
	task.Update(ctx, w.cfg.Store.Tasks(), id, func(r *task.Record) error {
		if r.Exec.Finished() {
			return task.ErrNoChange
		}
		r.Error = reason
		return r.SetExec(task.Failed, reason, w.cfg.NodeID, w.cfg.Now().UTC())
	})
	// The pusher must learn the attempt ended: mark the output done with the error.
	o, _ := task.GetOutput(ctx, w.cfg.Store.Output(), id)
	if o == nil {
		o = &task.Output{TaskID: id}
	}
	o.Done, o.Error, o.Updated = true, reason, w.cfg.Now().UTC()
	task.PutOutput(ctx, w.cfg.Store.Output(), o)
}

func (w *Worker) prompt(ctx context.Context, m task.Message, _ *task.Record) []ai.Message {
	var msgs []ai.Message
	if w.cfg.SystemPrompt != "" {
		msgs = append(msgs, ai.Message{Role: "system", Content: w.cfg.SystemPrompt})
	}
	conv, _, err := task.LoadConversation(ctx, w.cfg.Store.Context(), jetstream.ConversationKey(m.Bot, m.Chat))
	if err == nil {
		for _, t := range conv.Turns {
			msgs = append(msgs, ai.Message{Role: t.Role, Content: t.Content})
		}
	}
	return append(msgs, ai.Message{Role: "user", Content: m.Question})
}

var errCanceled = errors.New("task canceled")

// checkCancel re-reads the record every cancelCheck and cancels the run
// with errCanceled once it says canceled.
func checkCancel(ctx context.Context, kv natsjs.KeyValue, id string, cancel context.CancelCauseFunc) (stop func()) {
	return every(ctx, cancelCheck, func(ctx context.Context) bool {
		if r, _, err := task.Get(ctx, kv, id); err == nil && r.Exec == task.Canceled {
			cancel(errCanceled)
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

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// coalescer accumulates deltas and writes the whole text at most once per
// interval (and only if it changed), so a backend emitting hundreds of
// tokens a second costs a few KV writes, and a backend that goes quiet
// still has its last words written within an interval.
type coalescer struct {
	kv  natsjs.KeyValue
	now func() time.Time

	mu    sync.Mutex
	out   task.Output
	b     strings.Builder
	dirty bool

	stop func()
}

func newCoalescer(ctx context.Context, kv natsjs.KeyValue, base task.Output, interval time.Duration, now func() time.Time) *coalescer {
	c := &coalescer{kv: kv, out: base, now: now}
	c.stop = every(ctx, interval, func(ctx context.Context) bool { c.flush(ctx); return true })
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

// flush writes the text if it changed since the last write.
func (c *coalescer) flush(ctx context.Context) error {
	c.mu.Lock()
	if !c.dirty {
		c.mu.Unlock()
		return nil
	}
	o := c.out
	o.Text, o.Updated = c.b.String(), c.now().UTC()
	c.dirty = false
	c.mu.Unlock()
	_, err := task.PutOutput(ctx, c.kv, &o)
	return err
}

// end stops the periodic writes; then finish or flush writes the last.
func (c *coalescer) end() { c.stop() }

// finish writes the final output, always.
func (c *coalescer) finish(ctx context.Context, mark func(*task.Output)) error {
	c.mu.Lock()
	o := c.out
	o.Text, o.Updated = c.b.String(), c.now().UTC()
	mark(&o)
	c.dirty = false
	c.mu.Unlock()
	_, err := task.PutOutput(ctx, c.kv, &o)
	return err
}
