package task

import (
	"context"
	"fmt"
)

// Usage is the tokens a task's answers took, as the backend reported them
// (ai.Usage): In the prompts', Out the answers'. Every attempt's counts,
// a failed one's too: it was paid for.
type Usage struct {
	In  int64 `json:"in"`
	Out int64 `json:"out"`
}

// AddUsage adds u, what attempt's answer took, to the task's record. It
// is fenced by attempt only: an attempt taken over records nothing
// (ErrSuperseded, its successor counts its own), but a task canceled or
// given up meanwhile still records what its answer cost.
func (l *Lifecycle) AddUsage(ctx context.Context, id string, attempt int, u Usage) error {
	_, err := l.update(ctx, id, func(r *Record) error {
		if r.Attempt != attempt {
			return fmt.Errorf("%w: attempt %d, the record is at %d", ErrSuperseded, attempt, r.Attempt)
		}
		if r.Usage == nil {
			r.Usage = &Usage{}
		}
		r.Usage.In += u.In
		r.Usage.Out += u.Out
		return nil
	})
	if err != nil {
		return fmt.Errorf("record the usage of task %s: %w", id, err)
	}
	return nil
}
