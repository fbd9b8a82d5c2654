package access

// Feedback: the thumbs up or down a user gives an answer. The first frame
// of every answer's stream (the receipt) carries feedback.id = the task's
// id, so WeCom shows the buttons and names the task in the
// feedback_event it sends when one is pressed; the verdict is recorded
// with the task (task.Lifecycle.Feedback) and counted (Metrics.Feedback).
// An answer whose receipt failed carries none: a later frame may not
// carry feedback (WeCom refuses it on any but a stream's first), and the
// pusher cannot know for sure that a receipt whose ack was lost was not
// applied.

import (
	"context"
	"errors"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
)

// feedbackOf is the feedback request of task id's first frame.
func feedbackOf(id string) *wecom.Feedback {
	if len(id) > wecom.MaxFeedbackIDBytes {
		return nil // never: task ids are 26 bytes
	}
	return &wecom.Feedback{ID: id}
}

// feedback records a feedback_event with the task its feedback.id names
// and counts it; a verdict without an id, or for no task of this bot, is
// logged and counted, not recorded. An event its task counted already
// (WeCom, or a reconnect, delivering it again: the record keeps the
// msgids it counted) is a duplicate, counted nowhere but in
// Stats.Duplicates.
func (a *Access) feedback(term *election.Term, ev *wecom.EventCallback) {
	fb := ev.Event.Feedback
	kind := "unknown"
	if fb != nil {
		kind = task.FeedbackKind(fb.Type)
	}
	counted := func() {
		if a.cfg.Metrics != nil {
			a.cfg.Metrics.Feedback(term.Bot, kind)
		}
	}
	log := a.log.With().Str("bot", term.Bot).Str("msgid", ev.MsgID).Str("kind", kind).Logger()
	if fb == nil || fb.ID == "" {
		counted()
		log.Warn().Msg("feedback_event without a feedback id: counted, not recorded")
		return
	}
	js := a.js.Load()
	if js == nil {
		counted()
		log.Warn().Str("task", fb.ID).Msg("feedback not recorded: JetStream not reachable yet")
		return
	}
	done := a.track(term)
	a.wg.Go(func() {
		defer done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(term.Context()), a.cfg.Timeout)
		defer cancel()
		rec := task.Feedback{Kind: kind, Content: fb.Content, Reasons: fb.InaccurateReasons, User: ev.From.UserID, At: a.cfg.Now().UTC()}
		if ev.CreateTime > 0 {
			rec.At = time.Unix(ev.CreateTime, 0).UTC()
		}
		_, err := js.lc.Feedback(ctx, term.Bot, fb.ID, ev.MsgID, rec)
		switch {
		case errors.Is(err, task.ErrFeedbackCounted):
			a.count(func(s *Stats) { s.Duplicates++ })
			log.Info().Str("task", fb.ID).Msg("duplicate feedback_event: its task counted it already")
			return
		case err != nil:
			counted()
			log.Warn().Err(err).Str("task", fb.ID).Msg("feedback not recorded with its task")
			return
		}
		counted()
		log.Info().Str("task", fb.ID).Msg("feedback recorded")
	})
}
