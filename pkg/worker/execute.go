package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/retry"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

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
	return w.execute(ctx, m, tier, 0, true, false).err
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
		w.execute(ctx, m, tier, 0, true, false)
	})
	return nil
}

// execute runs one attempt of a task and records how it ended. final says
// no other attempt will follow if this one fails (the queue's last
// delivery, or a fallback tier); deliveries is the queue's count, 0 off
// the queue; requeue, that a final queue message may be requeued with
// fresh deliveries if the node stops during the attempt. The attempt is
// a sequence of steps; each step's end goes through settle, where decide
// (decide.go) says whether the attempt goes on and, if not, what becomes
// of the record and of the queue message.
func (w *Worker) execute(ctx context.Context, m task.Message, tier string, deliveries int, final, requeue bool) result {
	a := w.newAttempt(ctx, m, tier, deliveries, final)
	a.requeue = requeue
	// The AI concurrency token is taken before the task starts: while it
	// waits the record stays queued (the user is told so) and handle's
	// in-progress acks keep the queue message.
	release, err := w.acquire(ctx, deliveries > 0)
	if res, over := a.settle(ending{step: stepToken, err: err}); over {
		return res
	}
	defer release()
	if res, over := a.settle(ending{step: stepStart, err: a.start(ctx)}); over {
		return res
	}
	runCtx, endRun := a.watch(ctx)
	defer endRun()
	run := w.botRun(m.Bot)
	prompt, conv := w.prompt(runCtx, m, run.Memory)
	atts, cleanup, err := w.attachments(runCtx, m)
	defer cleanup() // the task's files leave this node with the run
	if res, over := a.settle(ending{step: stepFiles, err: err, nodeStopping: ctx.Err() != nil}); over {
		return res
	}
	req := ai.Request{TaskID: m.TaskID, Attempt: a.n, Messages: prompt, Attachments: atts,
		Bot: m.Bot, Chat: m.Chat, ChatType: m.ChatType, User: m.User, MsgID: m.MsgID, Event: clickEvent(m.Click)}
	defer a.openOutput(run)()
	err = a.answer(runCtx, run, req)
	if res, over := a.settle(a.answered(ctx, runCtx, run, err)); over {
		return res
	}
	// The answer's last writes, in this order: the reply's files stored
	// and named in the output (reply.go), the complete text stored under
	// this attempt, then the record's "succeeded", which hashes that text:
	// the pusher delivers exactly what Finish hashed.
	if res, over := a.settle(ending{step: stepReply, err: a.storeReply(ctx)}); over {
		return res
	}
	if res, over := a.settle(ending{step: stepStore, err: a.storeAnswer(ctx)}); over {
		return res
	}
	done, err := a.recordSucceeded(ctx)
	if res, over := a.settle(ending{step: stepFinish, err: err}); over {
		return res
	}
	a.succeeded(done, run, conv)
	return result{action: actAck}
}

// attempt is one run of a task on this worker: what its steps share.
type attempt struct {
	w          *Worker
	lc         Lifecycle
	m          task.Message
	tier       string
	deliveries int  // the queue's count; 0: off the queue
	final      bool // no attempt follows if this one fails
	requeue    bool // (final, on the queue) its message may be requeued once more
	log        zerolog.Logger
	bg         context.Context // the worker's context without its end: the record's last writes

	n       int                     // the attempt's number (start)
	started time.Time               // the task's first attempt's start: the deadline counts from it
	cancel  context.CancelCauseFunc // ends the run (watch)

	out   *coalescer         // the attempt's text (openOutput)
	steps []task.BackendStep // the backends the run asked (answer)
	sent  ai.Reply           // what the backend handed over beside the text (answer)
	reply *task.Reply        // the reply's objects stored (storeReply)
}

func (w *Worker) newAttempt(ctx context.Context, m task.Message, tier string, deliveries int, final bool) *attempt {
	return &attempt{w: w, lc: w.cfg.Lifecycle, m: m, tier: tier, deliveries: deliveries, final: final,
		log: w.log.With().Str("task", m.TaskID).Str("bot", m.Bot).Logger(), bg: context.WithoutCancel(ctx)}
}

// settle is the end of one of the attempt's steps: decide says whether the
// attempt goes on; if not (over), settle does what decide says of the
// output, the record and the log, and returns what becomes of the queue
// message.
func (a *attempt) settle(e ending) (res result, over bool) {
	e.final, e.offQueue, e.requeue, e.limit = a.final, a.deliveries == 0, a.requeue, a.w.cfg.Deadline
	v := decide(e)
	if v.goOn {
		return result{}, false
	}
	if v.flush {
		a.out.flush(a.bg, a.outputFailed)
	}
	if v.note != "" {
		a.log.Info().Err(e.err).Msg(v.note)
	}
	switch v.record {
	case recordGiveUp:
		_, err := a.lc.GiveUp(a.bg, a.m.TaskID, v.why, nil)
		a.w.storeError("record_write", err)
		a.log.Warn().Msg(v.why)
	case recordFail:
		var steps []task.BackendStep
		if v.steps {
			steps = a.steps
		}
		_, err := a.lc.Fail(a.bg, a.m.TaskID, a.n, v.why, v.retry, steps...)
		a.w.storeError("record_write", err)
		res := failOutcome(err, v.retry, v.why)
		if v.requeue && res.action == actRetry {
			res.action = actRequeue
		}
		if res.action == actGiveUp {
			a.log.Error().Str("reason", v.why).Msg("task failed")
		}
		return res, true
	}
	return v.res, true
}

// start makes the record say running under a new attempt. When the tasks
// bucket does not answer (its stream electing a leader, a server failing
// over), that is not the task's fault, so no delivery of the queue's few
// is spent on it: Start is asked again, patiently (StorePatience), while
// handle's in-progress acks keep the message. Any other answer is
// settle's.
func (a *attempt) start(ctx context.Context) error {
	n, rec, err := a.lc.Start(ctx, a.m, a.tier, a.deliveries)
	if task.StoreFailed(err) {
		a.w.storeError("record_write", err)
		a.w.patiently(ctx, a.log, "start the task (write its record)", func() error {
			n, rec, err = a.lc.Start(ctx, a.m, a.tier, a.deliveries)
			if task.StoreFailed(err) {
				a.w.storeError("record_write", err)
				return err
			}
			return nil // an answer: settle decides
		})
	}
	if err != nil {
		a.w.storeError("record_write", err)
		return err
	}
	a.n, a.started = n, rec.Started
	a.log = a.log.With().Int("attempt", n).Logger()
	return nil
}

// watch is the run's context, until end: /stop (or an operator's cancel)
// marks the record canceled and announces it, and the record is re-read
// now and then in case the announcement was missed (cancelcheck.go); a
// later attempt's takeover ends it too; and so does the execution
// deadline, counted from the first attempt.
func (a *attempt) watch(ctx context.Context) (runCtx context.Context, end func()) {
	w, id := a.w, a.m.TaskID
	runCtx, cancel := context.WithCancelCause(ctx)
	a.cancel = cancel
	runCtx, cancelDeadline := context.WithDeadlineCause(runCtx, a.started.Add(w.cfg.Deadline), errDeadline)
	w.mu.Lock()
	w.running[id] = cancel
	w.mu.Unlock()
	stopCheck := w.checkCancel(runCtx, id, a.n, cancel)
	return runCtx, func() {
		stopCheck()
		w.mu.Lock()
		delete(w.running, id)
		w.mu.Unlock()
		cancelDeadline()
		cancel(nil)
	}
}

// botRun is the bot's settings as its task starts (a change meanwhile is
// for the next task), its answer cap within bounds.
func (w *Worker) botRun(bot string) BotRun {
	run := w.cfg.Bots.Run(bot)
	if run.MaxAnswerBytes <= 0 || run.MaxAnswerBytes > config.MaxAnswerBytesLimit {
		run.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	return run
}

// openOutput makes the attempt's text: a coalescer writing through the
// attempt's fenced writer, which answers the pusher's flush requests
// (flush.go). close, once the run is over (its record written), drops
// its text in progress: the answer is in the output bucket.
func (a *attempt) openOutput(run BotRun) (close func()) {
	a.out = newCoalescer(a.lc.Output(a.m.TaskID, a.m.Bot, a.n), run.MaxAnswerBytes, a.w.cfg.TruncatedNote)
	untrack := a.w.tracked(a.m.TaskID, a.out)
	return func() {
		untrack()
		rctx, cancel := context.WithTimeout(a.bg, storeCallTimeout)
		defer cancel()
		a.out.retire(rctx)
	}
}

// outputFailed hears of a failed output write: counted; one refused
// because a later attempt took over ends the run.
func (a *attempt) outputFailed(err error) {
	a.w.storeError("output_write", err)
	if errors.Is(err, task.ErrSuperseded) {
		a.cancel(errSuperseded)
	}
}

// answer asks the bot's backend (model.go: the call's metrics and usage),
// its text written as it comes, coalesced. The backends asked (a
// fallback, a breaker's skip) go to the record; a reply (images, files, a
// card) the answering backend hands over goes to the sink. An answer cut
// at its cap, with the note, is the answer, complete as it is: longer
// would never fit the output bucket, and a rerun would only be as long
// again.
func (a *attempt) answer(runCtx context.Context, run BotRun, req ai.Request) error {
	stopWrites := a.out.writeEvery(runCtx, a.w.clock(), a.w.cfg.OutputInterval, a.outputFailed)
	streamCtx, route := ai.WithRoute(runCtx)
	sink := &ai.ReplySink{}
	// Its thinking is stored with the text (the pusher shows it or not).
	streamCtx = ai.WithThinking(ai.WithReplySink(streamCtx, sink), a.out.think)
	err := a.w.stream(streamCtx, a.m, a.n, run, req, route, a.out.add)
	stopWrites()
	a.steps, a.sent = backendSteps(route), sink.Reply()
	if errors.Is(err, errAnswerCapped) {
		a.log.Warn().Int("max_answer_bytes", run.MaxAnswerBytes).Msg("answer truncated at its cap")
		return nil
	}
	return err
}

// answered is the answer's ending: how the run ended (runCtx's cause),
// whether the node is stopping (ctx), and the times of the deadline.
func (a *attempt) answered(ctx, runCtx context.Context, run BotRun, err error) ending {
	return ending{step: stepAnswer, err: err, stopped: context.Cause(runCtx), nodeStopping: ctx.Err() != nil,
		started: a.started, now: a.w.cfg.Now(), backend: run.Backend.Name()}
}

// storeReply stores the reply's images and files (patiently: the answer
// is in hand) and makes the output's last write carry them, with a note
// naming what was left out.
func (a *attempt) storeReply(ctx context.Context) error {
	var note string
	err := a.w.patiently(ctx, a.log, "store the reply's files", func() (err error) {
		a.reply, note, err = a.w.storeReply(a.bg, a.m, a.n, a.sent)
		return err
	})
	if err == nil {
		a.out.finishWith(note, a.reply)
	}
	return err
}

// storeAnswer writes the complete text as the attempt's last write (the
// output bucket), patiently. An answer not stored will not be delivered:
// its reply's objects are deleted.
func (a *attempt) storeAnswer(ctx context.Context) error {
	err := a.w.patiently(ctx, a.log, "store the answer", func() error { return a.out.flush(a.bg, a.outputFailed) })
	if err != nil {
		a.w.dropReply(a.bg, a.m.TaskID, a.reply)
	}
	return err
}

// recordSucceeded makes the record say succeeded, with the answer's hash
// (patiently). Refused (the attempt superseded, the task finished
// meanwhile), the answer will not be delivered: its reply's objects are
// deleted. After any other error Finish may have been recorded, and they
// are kept.
func (a *attempt) recordSucceeded(ctx context.Context) (done *task.Record, err error) {
	text := a.out.text()
	err = a.w.patiently(ctx, a.log, "record the task succeeded", func() (err error) {
		done, err = a.lc.Finish(a.bg, a.m.TaskID, a.n, text, a.steps...)
		a.w.storeError("record_write", err)
		return err
	})
	if errors.Is(err, task.ErrSuperseded) || errors.Is(err, task.ErrFinished) {
		a.w.dropReply(a.bg, a.m.TaskID, a.reply)
	}
	return done, err
}

// succeeded is what follows the record's "succeeded": off the queue, the
// conversation freed (no queue ack will); and the conversation's context
// gets the turn, once: only the attempt that finished the task adds it.
func (a *attempt) succeeded(done *task.Record, run BotRun, conv readConv) {
	if a.deliveries == 0 {
		a.lc.FreeConversation(a.bg, done, "finished on tier "+a.tier)
	}
	text := a.out.text()
	key := jetstream.ConversationKey(a.m.Bot, a.m.Chat)
	if err := task.AppendExchangeFrom(a.bg, a.w.buckets.Context(), key, turn(a.m), text, run.Memory, a.w.cfg.Now(), conv.c, conv.rev); err != nil {
		a.w.storeError("context_write", err)
		a.log.Warn().Err(err).Msg("conversation context not updated")
	}
	a.log.Info().Int("bytes", len(text)).Bool("truncated", a.out.truncated()).Msg("task succeeded")
}

// patiently runs fn until it succeeds, fails for good (the attempt was
// superseded, the task finished meanwhile), or StorePatience has passed
// since the first try, or ctx ends (the node stops: the queue, or the
// sweep, takes it from there); it returns fn's last error.
func (w *Worker) patiently(ctx context.Context, log zerolog.Logger, what string, fn func() error) error {
	settled := func(err error) bool {
		return err == nil || errors.Is(err, task.ErrSuperseded) || errors.Is(err, task.ErrFinished)
	}
	tries := 0
	return retry.Until(ctx, w.clock(), retry.New(250*time.Millisecond, 5*time.Second), w.cfg.StorePatience, func() error {
		err := fn()
		switch tries++; {
		case tries == 1 && !settled(err):
			log.Warn().Err(err).Dur("patience", w.cfg.StorePatience).Msgf("could not %s; retrying while JetStream recovers", what)
		case tries > 1 && err == nil:
			log.Info().Msgf("%s: done after retrying", what)
		}
		return err
	}, settled)
}

// readConv is the conversation as the prompt read it, at rev (c nil: not
// read): the answer's turn is appended from it (task.AppendExchangeFrom),
// with no second read when nobody wrote it meanwhile.
type readConv struct {
	c   *task.Conversation
	rev uint64
}

func (w *Worker) prompt(ctx context.Context, m task.Message, mem task.Memory) ([]ai.Message, readConv) {
	var msgs []ai.Message
	if w.cfg.SystemPrompt != "" {
		msgs = append(msgs, ai.Message{Role: "system", Content: w.cfg.SystemPrompt})
	}
	question := ai.Message{Role: "user", Content: m.Question}
	if mem.Turns <= 0 { // the bot keeps no context
		return append(msgs, question), readConv{}
	}
	lctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	conv, rev, err := task.LoadConversation(lctx, w.buckets.Context(), jetstream.ConversationKey(m.Bot, m.Chat))
	if ctx.Err() == nil {
		w.storeError("context_read", err)
	}
	if err != nil {
		return append(msgs, question), readConv{}
	}
	if !conv.Idle(mem, w.cfg.Now()) {
		for _, t := range conv.Turns {
			msgs = append(msgs, ai.Message{Role: t.Role, Content: t.Content})
		}
	}
	return append(msgs, question), readConv{c: conv, rev: rev}
}

// Causes that end a run early.
var (
	errCanceled   = errors.New("task canceled")
	errSuperseded = errors.New("task taken over by a later attempt")
	errDeadline   = errors.New("task execution deadline passed")
)

// storeCallTimeout bounds one JetStream call made under a task's run
// context. That context carries the execution deadline (30 minutes by
// default), which replaces nats.go's own 5 s request timeout: without
// this bound, a request whose reply was lost with a NATS server that died
// under it would wait that long, the task "running" with no output.
const storeCallTimeout = 10 * time.Second
