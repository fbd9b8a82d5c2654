package task

import (
	"context"
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
)

// Feedback is a user's verdict on a task's answer (WeCom's
// feedback_event for the feedback.id its first stream frame carried: the
// task id).
type Feedback struct {
	// Kind is FeedbackKind of WeCom's type: accurate, inaccurate, canceled
	// (the verdict withdrawn) or unknown.
	Kind    string    `json:"kind"`
	Content string    `json:"content,omitempty"`
	Reasons []int     `json:"reasons,omitempty"`
	User    string    `json:"user"`
	At      time.Time `json:"at"`
	// Count is how many verdicts the task got (the user may change it);
	// the fields above are the latest's.
	Count int `json:"count"`
}

// FeedbackKind names a feedback_event's type: "accurate", "inaccurate",
// "canceled", or "unknown" for a type WeCom did not document.
func FeedbackKind(t int) string {
	switch t {
	case wecom.FeedbackAccurate:
		return "accurate"
	case wecom.FeedbackInaccurate:
		return "inaccurate"
	case wecom.FeedbackCanceled:
		return "canceled"
	}
	return "unknown"
}

// Feedback records bot's user's verdict on task id (the latest one kept,
// Count counting them). ErrNoChange never: an id that is not this bot's
// task is an error naming it.
func (l *Lifecycle) Feedback(ctx context.Context, bot, id string, fb Feedback) (*Record, error) {
	return l.update(ctx, id, func(r *Record) error {
		if r.Bot != bot {
			return fmt.Errorf("feedback for task %s of bot %s, not of %s", id, r.Bot, bot)
		}
		if r.Feedback != nil {
			fb.Count = r.Feedback.Count
		}
		fb.Count++
		r.Feedback = &fb
		return nil
	})
}
