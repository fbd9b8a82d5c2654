package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/botctl/botctl/pkg/task"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

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
			w.handBack(msg)
		}
	}()
	sub, err := w.cfg.Store.JetStream().Conn().Subscribe(w.cfg.Store.Names().CancelSubjects(), func(m *nats.Msg) {
		id, ok := w.cfg.Store.Names().CanceledTask(m.Subject)
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
	fsub, err := w.subscribeFlush()
	if err != nil {
		return err
	}
	defer fsub.Unsubscribe()
	cons := w.cfg.Store.Workers()
	for ctx.Err() == nil {
		w.mu.Lock()
		held := w.held
		w.mu.Unlock()
		free := min(w.slots()-held, w.freeTokens())
		if free <= 0 {
			t := w.clock().NewTimer(time.Second)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-freed:
			case <-w.tokenFreed:
			case <-t.C(): // slots may have grown (leadership ended)
			}
			t.Stop()
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
			// No responders (the cluster's servers restarting, JetStream
			// electing its leaders), the consumer gone: such a fetch ends
			// at once, and fetching again at once sent hundreds of pull
			// requests a second to the recovering servers.
			w.natsError("fetch")
			w.log.Debug().Err(err).Msg("fetch ended with an error; fetching again in a second")
			pause.For(ctx, time.Second)
		}
	}
	return nil
}

// handBack returns a message delivered after the stop began, unrun: nak'd
// for another delivery, or, on its last delivery (where a nak would have
// it given up without ever running), requeued with fresh deliveries.
func (w *Worker) handBack(msg natsjs.Msg) {
	if !w.cfg.Store.FinalDelivery(msg) {
		msg.Nak()
		return
	}
	if err := w.requeue(context.Background(), msg); err != nil {
		w.log.Warn().Err(err).Str("subject", msg.Subject()).Msg("a task on its last delivery, fetched as the worker stopped, was not requeued; the sweep ends it")
	}
}

// requeue puts msg back in the queue with fresh deliveries (Store.Requeue),
// bounded by handBackTimeout.
func (w *Worker) requeue(ctx context.Context, msg natsjs.Msg) error {
	ctx, cancel := context.WithTimeout(ctx, handBackTimeout)
	defer cancel()
	_, err := w.cfg.Store.Requeue(ctx, msg)
	return err
}

// handBackTimeout bounds requeueing one message on the way out.
const handBackTimeout = 5 * time.Second

// handle runs one queue message to its end: acked when the task needs
// nothing more, nak'd for another attempt, terminated when it can never
// run again, left alone when a later attempt holds it.
func (w *Worker) handle(ctx context.Context, msg natsjs.Msg, fetched <-chan struct{}) {
	if err := schema.Check(task.KindMessage, msg.Data()); err != nil {
		w.unreserve()
		w.passNewer(msg, err)
		return
	}
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

	stopAlive := keepAlive(ctx, w.clock(), msg, w.cfg.Store.Options().TaskAckWait/3)
	requeue := jetstream.Requeues(msg.Headers()) < task.MaxRequeues
	res := w.execute(ctx, m, "queue", deliveries, w.cfg.Store.FinalDelivery(msg), requeue)
	for res.action == actHold {
		if res = w.hold(ctx, m, log, res.err); res.action == actRun {
			w.reserve() // execute's acquire takes it back
			res = w.execute(ctx, m, "queue", deliveries, w.cfg.Store.FinalDelivery(msg), requeue)
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
	case actRequeue:
		if ctx.Err() != nil {
			<-fetched // the copy must not be delivered into this worker's own pull request
		}
		if err := w.requeue(bg, msg); err != nil {
			log.Warn().Err(err).Msg("a task interrupted on its last delivery was not requeued; nak'd, its deliveries run out")
			msg.Nak()
			return
		}
		log.Info().Msg("interrupted on its last delivery: requeued with fresh deliveries")
	case actGiveUp:
		if err := w.cfg.Store.GiveUp(bg, msg, res.err.Error()); err != nil {
			log.Warn().Err(err).Msg("queue message not removed; the sweep removes it")
		}
	case actLeave:
		log.Info().Err(res.err).Msg("a later attempt holds the task; leaving its message alone")
	}
}

// passNewer hands a task message a newer botctl wrote back to the queue
// untouched, for a node of that version: not acked, not terminated, its
// record not read or written. It comes back after RetryDelay, to whichever
// worker fetches it then; each pass counts as one of the task's
// deliveries (TaskMaxDeliver), so a queue with no newer worker ends it as
// a task whose deliveries ran out, ended by a newer node (task.Sweep and
// WatchMaxDeliveries leave it alone here).
func (w *Worker) passNewer(msg natsjs.Msg, err error) {
	w.log.Warn().Err(err).Str("subject", msg.Subject()).Dur("retry_in", w.cfg.RetryDelay).Msg("task message left for a newer node")
	if nerr := msg.NakWithDelay(w.cfg.RetryDelay); nerr != nil {
		w.log.Warn().Err(nerr).Msg("nak failed; the task is redelivered after the ack wait")
	}
}

// ack removes a finished task's message from the queue, which frees its
// conversation, and makes sure of it. A plain ack is fire-and-forget: one
// lost while the consumer's leader moves (a NATS server restarting)
// leaves the message in the queue and the conversation refusing new
// questions as busy until a redelivery or the sweep, a minute or more.
// So the ack is one the server confirms, retried
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

// keepAlive sends in-progress acks every period until stopped.
func keepAlive(ctx context.Context, clk clock.Clock, msg natsjs.Msg, period time.Duration) (stop func()) {
	if period <= 0 {
		period = 10 * time.Second
	}
	return every(ctx, clk, period, func(context.Context) bool { msg.InProgress(); return true })
}

// ackTimeout bounds one confirmed ack.
const ackTimeout = 5 * time.Second

// action is what becomes of a queue message after an attempt.
type action int

const (
	actAck     action = iota // the task needs nothing more from the queue
	actRetry                 // the record is queued again: nak for another attempt
	actGiveUp                // the record is failed for good: terminate the message
	actLeave                 // superseded: a later attempt holds the message
	actHold                  // the task runs off the queue: hold the message until it ends
	actRun                   // (hold) run the task now
	actRequeue               // the record is queued again, the message on its last delivery: requeue it with fresh deliveries
)

type result struct {
	action action
	err    error
}
