package task

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
	natsjs "github.com/nats-io/nats.go/jetstream"
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
	// MsgIDs are the msgids of the feedback_events counted, oldest first,
	// the last FeedbackMsgIDsKept of them: an event delivered again is
	// counted once (ErrFeedbackCounted). Records written before botctl
	// kept them have none.
	MsgIDs []string `json:"msgids,omitempty"`
}

// FeedbackMsgIDsKept is how many msgids of a task's feedback_events its
// record keeps to know an event delivered again: more than a user
// changes a verdict in practice, few enough to keep the record small.
const FeedbackMsgIDsKept = 16

// ErrFeedbackCounted: Feedback was given a feedback_event its task
// counted already (the same msgid delivered again). Nothing was changed;
// the caller counts it nowhere else either.
var ErrFeedbackCounted = errors.New("task: feedback event already counted")

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

// Feedback records bot's user's verdict on task id, given by the
// feedback_event msgid (the latest one kept, Count counting them). An
// event counted already changes nothing and returns ErrFeedbackCounted;
// an event without a msgid ("") cannot be told from a redelivery and is
// counted each time. An id that is not this bot's task is an error
// naming it. fb's Count and MsgIDs are the record's to set.
func (l *Lifecycle) Feedback(ctx context.Context, bot, id, msgid string, fb Feedback) (*Record, error) {
	return feedback(ctx, l.store.Tasks(), bot, id, msgid, fb)
}

// feedback is Feedback on the task bucket kv.
func feedback(ctx context.Context, kv natsjs.KeyValue, bot, id, msgid string, fb Feedback) (*Record, error) {
	counted := false
	r, err := update(ctx, kv, id, Rules{}.Feedback(bot, id, msgid, fb, &counted))
	if err == nil && counted {
		return r, fmt.Errorf("%w: feedback_event %s of task %s", ErrFeedbackCounted, msgid, id)
	}
	return r, err
}

// countFeedback is the verdict fb of event msgid after prev, the task's
// feedback so far (nil: none): fb counted one more, with the msgids kept.
// False: prev counted msgid already. It builds the result from its
// arguments alone, changing none of them, so that a retried update (the
// compare-and-set lost to another writer of the record) counts the
// verdict once: a count carried over from the lost try counted one
// feedback_event twice when CI was loaded.
func countFeedback(prev *Feedback, msgid string, fb Feedback) (*Feedback, bool) {
	next := fb
	next.Count, next.MsgIDs = 1, nil
	if prev != nil {
		if msgid != "" && slices.Contains(prev.MsgIDs, msgid) {
			return nil, false
		}
		next.Count = prev.Count + 1
		next.MsgIDs = slices.Clone(prev.MsgIDs)
	}
	next.Reasons = slices.Clone(fb.Reasons)
	if msgid != "" {
		next.MsgIDs = append(next.MsgIDs, msgid)
		if n := len(next.MsgIDs); n > FeedbackMsgIDsKept {
			next.MsgIDs = slices.Clone(next.MsgIDs[n-FeedbackMsgIDsKept:])
		}
	}
	return &next, true
}
