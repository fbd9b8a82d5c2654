package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/botctl/botctl/dataplane"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/media"
	"github.com/botctl/botctl/pkg/pause"
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
	if task.StoreFailed(err) {
		// The tasks bucket did not answer (its stream electing a
		// leader, a server failing over): not the task's fault, so no
		// delivery of the queue's few is spent on it (the chaos suite's
		// churn-tasks-bucket used all five in ten seconds, and the user
		// got a failure for a question that could be answered). Start
		// again, patiently; handle's in-progress acks keep the message.
		w.storeError("record_write", err)
		w.patiently(ctx, log, "start the task (write its record)", func() error {
			attempt, rec, err = lc.Start(ctx, m, tier, deliveries)
			if task.StoreFailed(err) {
				w.storeError("record_write", err)
				return err
			}
			return nil // an answer: the switch below decides
		})
	}
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
	stopCheck := w.checkCancel(runCtx, m.TaskID, attempt, cancel)
	defer stopCheck()

	// The bot's settings as the task starts: a change meanwhile is for the
	// next task.
	run := w.cfg.Bots.Run(m.Bot)
	if run.MaxAnswerBytes <= 0 || run.MaxAnswerBytes > config.MaxAnswerBytesLimit {
		run.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	prompt, conv := w.prompt(runCtx, m, run.Memory)
	req := ai.Request{TaskID: m.TaskID, Attempt: attempt, Messages: prompt,
		Bot: m.Bot, Chat: m.Chat, ChatType: m.ChatType, User: m.User, MsgID: m.MsgID}
	atts, cleanup, err := w.attachments(runCtx, m)
	defer cleanup() // the task's files leave this node with the run
	if err != nil {
		// Gone (past media.ttl, or deleted when its delivery was final: an operator's
		// retry): no retry brings them back. Else JetStream failed: another attempt may.
		why := "the files sent with the question could not be read: " + err.Error()
		return w.failed(bg, m, attempt, why, !errors.Is(err, media.ErrGone) && !final && ctx.Err() == nil)
	}
	req.Attachments = atts
	// A failed output write is counted; one refused because a later
	// attempt took over ends the run.
	outputFailed := func(err error) {
		w.storeError("output_write", err)
		if errors.Is(err, task.ErrSuperseded) {
			cancel(errSuperseded)
		}
	}
	out := newCoalescer(lc.Output(m.TaskID, m.Bot, attempt), run.MaxAnswerBytes, w.cfg.TruncatedNote)
	// Once the run is over (its record written), its text in progress
	// is dropped: the answer is in the output bucket.
	defer func() {
		rctx, cancel := context.WithTimeout(bg, storeCallTimeout)
		defer cancel()
		out.retire(rctx)
	}()
	stopWrites := out.writeEvery(runCtx, w.clock(), w.cfg.OutputInterval, outputFailed)
	defer w.tracked(m.TaskID, out)() // the pusher's flush requests (flush.go)
	// The backends asked (a fallback, a breaker's skip) go to the record;
	// a reply (images, files, a card) the answering backend hands over
	// goes to the sink.
	streamCtx, route := ai.WithRoute(runCtx)
	sink := &ai.ReplySink{}
	err = w.stream(ai.WithReplySink(streamCtx, sink), m, attempt, run, req, route, out.add) // model.go: metrics, usage
	stopWrites()
	steps := backendSteps(route)
	text := out.text()
	if errors.Is(err, errAnswerCapped) {
		// Cut at the cap, with the note: the answer, complete as it is.
		// Longer would never fit the output bucket, and a rerun would
		// only be as long again.
		log.Warn().Int("max_answer_bytes", run.MaxAnswerBytes).Msg("answer truncated at its cap")
		err = nil
	}

	cause := context.Cause(runCtx)
	switch {
	case errors.Is(cause, errCanceled):
		out.flush(bg, outputFailed) // what came before the stop stays on the user's screen
		log.Info().Msg("task canceled")
		return result{action: actAck}
	case errors.Is(cause, errSuperseded):
		return result{action: actLeave, err: task.ErrSuperseded}
	case errors.Is(cause, errDeadline):
		out.flush(bg, outputFailed)
		why := fmt.Sprintf("execution deadline %s passed without an answer", w.cfg.Deadline)
		_, gerr := lc.GiveUp(bg, m.TaskID, why, nil)
		w.storeError("record_write", gerr)
		log.Warn().Msg(why)
		return result{action: actGiveUp, err: errors.New(why)}
	case err != nil && ctx.Err() != nil:
		out.flush(bg, outputFailed)
		if final {
			why := "the node stopped during the task's last attempt"
			return w.failed(bg, m, attempt, why, false)
		}
		return w.failed(bg, m, attempt, "interrupted: the node is stopping", true)
	case err != nil:
		out.flush(bg, outputFailed)
		// A cut answer (ai.ErrCut: the backend failed after its first
		// token; the note is in the text) ends as it is, not retried.
		retry := !errors.Is(err, ai.ErrBadRequest) && !errors.Is(err, ai.ErrCut) && !final
		why := fmt.Sprintf("backend %s: %v", run.Backend.Name(), err)
		if final && !errors.Is(err, ai.ErrBadRequest) && !errors.Is(err, ai.ErrCut) {
			why = "last attempt failed: " + why
		}
		return w.failed(bg, m, attempt, why, retry, steps...)
	}
	// The reply's images and files are stored, and named in the output's
	// last write, before the record says succeeded (reply.go).
	var reply *task.Reply
	var note string
	if err := w.patiently(ctx, log, "store the reply's files", func() (err error) {
		reply, note, err = w.storeReply(bg, m, attempt, sink.Reply())
		return err
	}); err != nil {
		return w.failed(bg, m, attempt, "reply not stored: "+err.Error(), !final)
	}
	out.finishWith(note, reply)
	text = out.text()
	// The complete text is stored under this attempt before the record
	// says succeeded: the pusher delivers exactly what Finish hashed.
	if err := w.patiently(ctx, log, "store the answer", func() error { return out.flush(bg, outputFailed) }); err != nil {
		if errors.Is(err, task.ErrSuperseded) {
			return w.dropReply(bg, m.TaskID, reply, result{action: actLeave, err: err})
		}
		return w.dropReply(bg, m.TaskID, reply, w.failed(bg, m, attempt, "answer not stored: "+err.Error(), !final))
	}
	var done *task.Record
	err = w.patiently(ctx, log, "record the task succeeded", func() (err error) {
		done, err = lc.Finish(bg, m.TaskID, attempt, text, steps...)
		w.storeError("record_write", err)
		return err
	})
	switch {
	case errors.Is(err, task.ErrSuperseded):
		return w.dropReply(bg, m.TaskID, reply, result{action: actLeave, err: err})
	case errors.Is(err, task.ErrFinished):
		return w.dropReply(bg, m.TaskID, reply, result{action: actAck}) // canceled or given up meanwhile: that stands
	case err != nil:
		return result{action: actRetry, err: err}
	}
	if deliveries == 0 {
		lc.FreeConversation(bg, done, "finished on tier "+tier)
	}
	// Only the attempt that finished the task adds its turn: once.
	key := dataplane.ConversationKey(m.Bot, m.Chat)
	if err := task.AppendExchangeFrom(bg, w.cfg.Store.Context(), key, turn(m), text, run.Memory, w.cfg.Now(), conv.c, conv.rev); err != nil {
		w.storeError("context_write", err)
		log.Warn().Err(err).Msg("conversation context not updated")
	}
	log.Info().Int("bytes", len(text)).Bool("truncated", out.truncated()).Msg("task succeeded")
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
func (w *Worker) failed(ctx context.Context, m task.Message, attempt int, why string, retry bool, steps ...task.BackendStep) result {
	_, err := w.cfg.Lifecycle.Fail(ctx, m.TaskID, attempt, why, retry, steps...)
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
	conv, rev, err := task.LoadConversation(lctx, w.cfg.Store.Context(), dataplane.ConversationKey(m.Bot, m.Chat))
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
