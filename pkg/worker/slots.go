package worker

import (
	"context"
	"errors"
	"fmt"
)

// slots is how many slots the worker uses now: LeaderSlots while this
// node leads a bot (0: none), else Slots; none while Config.Skew says the
// clock is off.
func (w *Worker) slots() int {
	if w.cfg.Skew != nil {
		if _, off := w.cfg.Skew.Off(); off {
			return 0 // see Config.Skew
		}
	}
	if w.cfg.Leadership != nil && w.cfg.LeaderSlots != LeaderSlotsAll && w.cfg.Leadership.LeadsAny() {
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

// ErrNoSlot: every slot of the worker is in use; the task was not started.
var ErrNoSlot = errors.New("worker: every slot is busy")

// ErrClockOff: this node's clock is too far from JetStream's to run a task
// (Config.Skew); the task was not started, another node may run it.
var ErrClockOff = errors.New("worker: this node's clock is off, it runs no task")

// takeSlot holds one slot for a task off the queue (the fetch loop counts it).
func (w *Worker) takeSlot() (release func(), err error) {
	if w.cfg.Skew != nil {
		if why, off := w.cfg.Skew.Off(); off {
			return nil, fmt.Errorf("%w: %s", ErrClockOff, why)
		}
	}
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
