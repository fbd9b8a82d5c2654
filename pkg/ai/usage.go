package ai

import (
	"context"
	"errors"
	"sync"
)

// Usage is what one answer cost in tokens, as its backend reported it:
// In the prompt's (the question, the conversation's context, the system
// prompt), Out the answer's.
//
// Reporting usage is optional, and beside the Backend interface rather
// than in it (Stream's signature is every backend's and every wrapper's):
// a backend that knows what an answer cost calls ReportUsage with the
// context it was given; the caller that wants to know puts a meter on
// that context first (WithUsage) and reads it once Stream returned. A
// backend that wraps others (a fallback) passes its context on, so the
// meter sums the usage of every backend that answered a part, failed
// attempts included. Without a meter ReportUsage does nothing.
//
// Who reports: openai (the stream's last chunk, asked for with
// stream_options.include_usage), dify (message_end's metadata.usage) and
// http (a "usage" object on any event). demo and exec report none.
type Usage struct {
	In  int64 `json:"in"`
	Out int64 `json:"out"`
}

// Total is In and Out together.
func (u Usage) Total() int64 { return u.In + u.Out }

// usageMeter sums the usage reported under one context.
type usageMeter struct {
	mu       sync.Mutex
	u        Usage
	reported bool
}

type usageKey struct{}

// WithUsage returns ctx with a meter of the usage backends report under
// it, and the function that reads it: the sum so far, and whether any
// backend reported at all (false: the backend does not say, which is not
// zero tokens).
func WithUsage(ctx context.Context) (context.Context, func() (Usage, bool)) {
	m := &usageMeter{}
	return context.WithValue(ctx, usageKey{}, m), func() (Usage, bool) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.u, m.reported
	}
}

// ReportUsage adds u to ctx's meter, if it has one (WithUsage). Safe from
// any goroutine.
func ReportUsage(ctx context.Context, u Usage) {
	m, _ := ctx.Value(usageKey{}).(*usageMeter)
	if m == nil || u.In < 0 || u.Out < 0 {
		return
	}
	m.mu.Lock()
	m.u.In += u.In
	m.u.Out += u.Out
	m.reported = true
	m.mu.Unlock()
}

// usageObject is a usage object as backends send it: OpenAI's and Dify's
// names (prompt_tokens, completion_tokens), or input_tokens and
// output_tokens (the http backend's webhook may send either).
type usageObject struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
}

func (o *usageObject) usage() Usage {
	return Usage{In: o.PromptTokens + o.InputTokens, Out: o.CompletionTokens + o.OutputTokens}
}

// Error classes, for metrics: what ErrorClass returns.
const (
	ErrorClassBackend    = "backend"
	ErrorClassBadRequest = "bad_request"
	ErrorClassTimeout    = "timeout"
	ErrorClassOther      = "other"
)

// ErrorClass names err's class (ErrBackend, ErrBadRequest, ErrTimeout, or
// another), "" for nil or a context that ended (the caller stopped: not
// the backend's failure).
func ErrorClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrBadRequest):
		return ErrorClassBadRequest
	case errors.Is(err, ErrTimeout):
		return ErrorClassTimeout
	case errors.Is(err, ErrBackend):
		return ErrorClassBackend
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ""
	}
	return ErrorClassOther
}
