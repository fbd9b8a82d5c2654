package ai

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/clock"
)

// Chain is a bot's backends in the order they are tried (ai.kind's,
// then each of ai.fallback): what New returns. For one answer:
//
//   - a backend whose circuit breaker is open is skipped;
//   - one that fails before its first token (it refuses the connection,
//     answers 5xx, times out, or says nothing within first_token_timeout)
//     is replaced by the next, for this same answer: the user sees
//     nothing of it but the wait;
//   - one that refuses the request (ErrBadRequest: 4xx, a content
//     filter) ends the answer with that refusal: the next backend is not
//     asked (the request, not the backend, is refused; a 401 is a key to
//     fix, not to hide behind another backend);
//   - one that fails after its first token ends the answer: the text so
//     far, then a note saying it was cut and by which backend's failure,
//     and Stream returns ErrCut. The next backend is not asked: the user
//     has read part of this answer, and another model cannot continue it.
//
// Every step is told to the Route in ctx (WithRoute), for the task's
// record. What a Chain does not do: retry a backend (the worker retries
// the whole chain), or share its breakers' state with other nodes.
type Chain struct {
	links      []Backend
	names      []string
	firstToken time.Duration // 0: no first-token timeout
	clock      clock.Clock   // nil: clock.Real
	policy     BreakerPolicy
	breakers   *Breakers
}

// ErrCut: the answer failed after part of it was emitted; the chain
// emitted a note saying so (CutNote) and the answer ends there. Not
// retryable: a retry would replace text the user has already read with
// another answer.
var ErrCut = errors.New("ai: answer cut")

// CutNote ends an answer cut by a backend's failure; %s is the backend's
// Name. ("The answer was cut: <backend> failed; what is above is
// incomplete, please ask again.")
const CutNote = "（回答中断：%s 出错，以上回答不完整，请重新提问。）"

// The outcomes of a Step.
const (
	StepAnswered = "answered" // the answer is this backend's
	StepFailed   = "failed"   // failed before its first token: the next one was asked
	StepSkipped  = "skipped"  // its circuit breaker is open
	StepRefused  = "refused"  // ErrBadRequest: the answer ends with the refusal
	StepCut      = "cut"      // failed after its first token: the answer ends with a note
	StepStopped  = "stopped"  // the task ended (stopped, canceled, its deadline) while it answered
)

// Step is one backend asked (or skipped) for an answer.
type Step struct {
	Backend string `json:"backend"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
}

// Route collects the Steps of the Streams made with its context
// (WithRoute): which backend answered, which were skipped or failed
// before it, and why.
type Route struct {
	mu    sync.Mutex
	steps []Step
}

type routeKey struct{}

// WithRoute returns ctx carrying a new Route, which a Chain's Stream
// under it fills.
func WithRoute(ctx context.Context) (context.Context, *Route) {
	r := &Route{}
	return context.WithValue(ctx, routeKey{}, r), r
}

// Steps are the steps so far, in order.
func (r *Route) Steps() []Step {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Step(nil), r.steps...)
}

func (r *Route) add(s Step) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.steps = append(r.steps, s)
	r.mu.Unlock()
}

func routeFrom(ctx context.Context) *Route {
	r, _ := ctx.Value(routeKey{}).(*Route)
	return r
}

func newChain(links []Backend, cfg Config, breakers *Breakers) *Chain {
	c := &Chain{links: links, firstToken: cfg.FirstTokenTimeout, breakers: breakers,
		policy: BreakerPolicy{Failures: cfg.Breaker.Failures, Cooldown: cfg.Breaker.Cooldown}}
	if c.breakers == nil {
		c.breakers = NewBreakers(nil, nil)
	}
	for _, b := range links {
		c.names = append(c.names, b.Name())
	}
	return c
}

// Name is the first backend's, and the fallbacks': "openai:gpt-4o
// (fallback dify:api.dify.ai, demo)".
func (c *Chain) Name() string {
	if len(c.names) == 1 {
		return c.names[0]
	}
	return c.names[0] + " (fallback " + strings.Join(c.names[1:], ", ") + ")"
}

// Backends are the chain's backends, in order.
func (c *Chain) Backends() []Backend { return append([]Backend(nil), c.links...) }

// errFirstToken is the cause put on a backend's context when its first
// token is late.
var errFirstToken = errors.New("ai: no first token in time")

// Stream asks the chain's backends in order, as the type says.
func (c *Chain) Stream(ctx context.Context, req Request, emit func(delta string) error) error {
	route := routeFrom(ctx)
	var fails []string
	var last error
	for i, b := range c.links {
		name := c.names[i]
		ok, probe := c.breakers.allow(req.Bot, name, c.policy)
		if !ok {
			why := "circuit breaker open (failed " + fmtFailures(c.policy.Failures) + ")"
			route.add(Step{Backend: name, Outcome: StepSkipped, Reason: why})
			fails = append(fails, name+": "+why)
			c.fellBack(req.Bot, i)
			continue
		}
		t := c.try(ctx, b, req, emit, func() { c.breakers.success(req.Bot, name) })
		switch {
		case t.err == nil:
			if !t.started { // an empty answer is an answer
				c.breakers.success(req.Bot, name)
			}
			route.add(Step{Backend: name, Outcome: StepAnswered})
			return nil
		case t.emitErr:
			// The caller stopped the stream (its cap): the answer is this
			// backend's, and the error the caller's.
			route.add(Step{Backend: name, Outcome: StepAnswered, Reason: t.err.Error()})
			return t.err
		case ctx.Err() != nil:
			c.breakers.release(req.Bot, name, probe && !t.started)
			route.add(Step{Backend: name, Outcome: StepStopped, Reason: context.Cause(ctx).Error()})
			return t.err
		case t.started:
			c.breakers.failure(req.Bot, name, t.err.Error(), c.policy, c.names)
			c.breakers.cut(req.Bot, name)
			emit("\n\n" + fmt.Sprintf(CutNote, name)) // a refusal (the cap) leaves the text as it is
			route.add(Step{Backend: name, Outcome: StepCut, Reason: t.err.Error()})
			return fmt.Errorf("%w: %s failed after the answer began: %v", ErrCut, name, t.err)
		case errors.Is(t.err, ErrBadRequest):
			c.breakers.success(req.Bot, name) // it is up: it answered, with a refusal
			route.add(Step{Backend: name, Outcome: StepRefused, Reason: t.err.Error()})
			return t.err
		}
		c.breakers.failure(req.Bot, name, t.err.Error(), c.policy, c.names)
		route.add(Step{Backend: name, Outcome: StepFailed, Reason: t.err.Error()})
		fails = append(fails, name+": "+t.err.Error())
		last = t.err
		c.fellBack(req.Bot, i)
	}
	if len(c.links) == 1 && last != nil {
		return last // the backend's own error, as without a chain
	}
	return fmt.Errorf("%w: no backend of bot %s answered: %s", ErrBackend, req.Bot, strings.Join(fails, "; "))
}

// fellBack counts the move from backend i to the next ("none": it was
// the last).
func (c *Chain) fellBack(bot string, i int) {
	to := "none"
	if i+1 < len(c.links) {
		to = c.names[i+1]
	}
	c.breakers.fellBack(bot, c.names[i], to)
}

// tried is how one backend's Stream went.
type tried struct {
	err     error
	started bool // it emitted its first token
	emitErr bool // err is emit's own
}

// try runs b's Stream under the first-token timeout; first is called at
// its first token.
func (c *Chain) try(ctx context.Context, b Backend, req Request, emit func(string) error, first func()) tried {
	bctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex
	started, late := false, false
	if c.firstToken > 0 {
		timer := clock.Or(c.clock).AfterFunc(c.firstToken, func() {
			mu.Lock()
			defer mu.Unlock()
			if !started {
				late = true
				cancel(errFirstToken)
			}
		})
		defer timer.Stop()
	}
	// A reply this backend sends counts only if its answer does: one that
	// failed after sending one (then the next backend answered) leaves
	// nothing of it in the answer.
	rctx, commitReply := ReplyScope(bctx)
	var emitted error
	err := b.Stream(rctx, req, func(d string) error {
		mu.Lock()
		if late {
			mu.Unlock()
			return errFirstToken
		}
		firstToken := !started
		started = true
		mu.Unlock()
		if firstToken {
			first()
		}
		if err := emit(d); err != nil {
			emitted = err
			return err
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	switch {
	case err == nil:
		commitReply()
		return tried{started: started}
	case emitted != nil && errors.Is(err, emitted):
		return tried{err: err, started: started, emitErr: true}
	case late && ctx.Err() == nil:
		return tried{err: fmt.Errorf("%w: %s sent no first token within %s (ai.first_token_timeout)", ErrTimeout, b.Name(), c.firstToken)}
	}
	return tried{err: err, started: started}
}
