package metrics

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Model is the instruments of the AI backends' calls and of the limits,
// per bot and backend (no user labels: a series per user would grow
// without bound), and a short in-memory summary per bot for GET /status
// (botctl status's model line).
type Model struct {
	firstToken *prometheus.HistogramVec
	answer     *prometheus.HistogramVec
	errors     *prometheus.CounterVec
	tokens     *prometheus.CounterVec
	refusals   *prometheus.CounterVec

	mu   sync.Mutex
	bots map[string]*modelBot
}

// modelBot is one bot's summary on this node.
type modelBot struct {
	answers, errors, tokensIn, tokensOut int64
	ttft                                 []time.Duration // the last ttftWindow first tokens, a ring
	next                                 int
}

// ttftWindow is how many of a bot's latest first-token times the status
// summary's p50 and p99 are of.
const ttftWindow = 512

func newModel(reg prometheus.Registerer) *Model {
	m := &Model{
		firstToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "ai_first_token_seconds",
			Help:    "From a task's request to its backend to the answer's first text, by bot and backend (calls that produced text).",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12)}, []string{"bot", "backend"}),
		answer: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "ai_answer_seconds",
			Help:    "From a task's request to its backend to the call's end, by bot and backend: every call, answered or failed (its count is the calls; botctl_ai_errors_total over it is the error rate).",
			Buckets: prometheus.ExponentialBuckets(0.25, 2, 12)}, []string{"bot", "backend"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "ai_errors_total",
			Help: "Backend calls that failed, by bot, backend and kind (backend: 5xx, 429, a cut stream, a failed command; bad_request: refused, 4xx, a content filter; timeout: the backend's timeout; other)."}, []string{"bot", "backend", "kind"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "ai_tokens_total",
			Help: "Tokens the backend reported (openai, dify, http with a usage object), by bot, backend and direction (in: the prompt, out: the answer)."}, []string{"bot", "backend", "direction"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "limit_refusals_total",
			Help: "Messages refused over a limit (no task run, the user told), by bot and limit (user.messages_per_minute, user.messages_per_day, user.tokens_per_day, user.bytes_per_day, bot.…)."}, []string{"bot", "limit"}),
		bots: map[string]*modelBot{},
	}
	reg.MustRegister(m.firstToken, m.answer, m.errors, m.tokens, m.refusals)
	return m
}

// LimitRefused counts a message refused over limit (access.Metrics).
func (m *Model) LimitRefused(bot, limit string) { m.refusals.WithLabelValues(bot, limit).Inc() }

// Call is one call of a bot's backend, as it ended.
type Call struct {
	FirstToken time.Duration // 0: no text came
	Duration   time.Duration
	ErrKind    string // "": answered
	TokensIn   int64
	TokensOut  int64
}

// Answered observes one backend call of bot.
func (m *Model) Answered(bot, backend string, c Call) {
	if c.FirstToken > 0 {
		m.firstToken.WithLabelValues(bot, backend).Observe(c.FirstToken.Seconds())
	}
	m.answer.WithLabelValues(bot, backend).Observe(c.Duration.Seconds())
	if c.ErrKind != "" {
		m.errors.WithLabelValues(bot, backend, c.ErrKind).Inc()
	}
	if c.TokensIn > 0 {
		m.tokens.WithLabelValues(bot, backend, "in").Add(float64(c.TokensIn))
	}
	if c.TokensOut > 0 {
		m.tokens.WithLabelValues(bot, backend, "out").Add(float64(c.TokensOut))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.bots[bot]
	if b == nil {
		b = &modelBot{}
		m.bots[bot] = b
	}
	b.answers++
	if c.ErrKind != "" {
		b.errors++
	}
	b.tokensIn += c.TokensIn
	b.tokensOut += c.TokensOut
	if c.FirstToken > 0 {
		if len(b.ttft) < ttftWindow {
			b.ttft = append(b.ttft, c.FirstToken)
		} else {
			b.ttft[b.next] = c.FirstToken
			b.next = (b.next + 1) % ttftWindow
		}
	}
}

// ModelSummary is one bot's calls on this node since it started, in
// GET /status ("model"): botctl status's model line.
type ModelSummary struct {
	Calls     int64 `json:"calls"`  // backend calls ended, answered or failed
	Errors    int64 `json:"errors"` // of which failed
	TokensIn  int64 `json:"tokens_in"`
	TokensOut int64 `json:"tokens_out"`
	// TTFTp50 and TTFTp99 are of the bot's latest (up to 512) first
	// tokens here, in milliseconds (0: none yet).
	TTFTp50 int64 `json:"ttft_p50_ms"`
	TTFTp99 int64 `json:"ttft_p99_ms"`
}

// Summary is every bot's summary on this node.
func (m *Model) Summary() map[string]ModelSummary {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]ModelSummary, len(m.bots))
	for bot, b := range m.bots {
		s := ModelSummary{Calls: b.answers, Errors: b.errors, TokensIn: b.tokensIn, TokensOut: b.tokensOut}
		if n := len(b.ttft); n > 0 {
			sorted := slices.Sorted(slices.Values(b.ttft))
			s.TTFTp50 = sorted[(n-1)*50/100].Milliseconds()
			s.TTFTp99 = sorted[(n-1)*99/100].Milliseconds()
		}
		out[bot] = s
	}
	return out
}
