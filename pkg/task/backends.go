package task

import "slices"

// BackendStep is one AI backend asked (or skipped) for an attempt's
// answer, as the worker's backend chain tells it (pkg/ai's Route): which
// answered, which were skipped or failed before it, and why.
type BackendStep struct {
	Attempt int    `json:"attempt"`
	Backend string `json:"backend"`          // its Name: "openai:gpt-4o-mini", "dify:api.dify.ai"
	Outcome string `json:"outcome"`          // answered, failed (the next was asked), skipped (breaker open), refused, cut, stopped
	Reason  string `json:"reason,omitempty"` // the failure, the refusal, why it was skipped
}

// MaxBackendSteps bounds Record.Backends: the latest are kept.
const MaxBackendSteps = 32

// Outcomes of a BackendStep whose backend's text is the attempt's answer.
const (
	BackendAnswered = "answered"
	BackendCut      = "cut"
)

// addBackends records attempt's steps: appended to Backends (the oldest
// dropped past MaxBackendSteps), and AnsweredBy is the backend whose text
// is the answer (answered, or cut after its first token), if any.
func (r *Record) addBackends(attempt int, steps []BackendStep) {
	if len(steps) == 0 {
		return
	}
	r.AnsweredBy = ""
	for _, s := range steps {
		s.Attempt = attempt
		r.Backends = append(r.Backends, s)
		if s.Outcome == BackendAnswered || s.Outcome == BackendCut {
			r.AnsweredBy = s.Backend
		}
	}
	if n := len(r.Backends); n > MaxBackendSteps {
		r.Backends = slices.Clone(r.Backends[n-MaxBackendSteps:])
	}
}
