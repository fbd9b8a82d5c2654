package wecomsim

import "github.com/botctl/botctl/pkg/wecom"

// feedbackEvent is the verdict of a feedback_event request: its
// feedback_id must be one a stream's first frame of bot b carried (WeCom
// shows the buttons only on such a reply), its type 1 to 3.
func (s *Server) feedbackEvent(b *bot, req EventRequest) (*wecom.FeedbackEvent, error) {
	if req.FeedbackID == "" {
		return nil, invalid("feedback_id is required for feedback_event: the feedback.id of the reply judged (see the transcript's feedback_id)")
	}
	if req.FeedbackType < wecom.FeedbackAccurate || req.FeedbackType > wecom.FeedbackCanceled {
		return nil, invalid("feedback_type %d: want 1 (accurate), 2 (inaccurate) or 3 (withdrawn)", req.FeedbackType)
	}
	b.mu.Lock()
	known := b.feedbackIDs[req.FeedbackID]
	b.mu.Unlock()
	if !known {
		return nil, invalid("feedback_id %s: no reply of this bot carried it (feedback.id on a stream's first frame)", quote(req.FeedbackID))
	}
	return &wecom.FeedbackEvent{ID: req.FeedbackID, Type: req.FeedbackType, Content: req.FeedbackContent,
		InaccurateReasons: req.InaccurateReasons}, nil
}
