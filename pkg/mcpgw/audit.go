package mcpgw

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Who may call the gateway (auth) and what each call leaves behind
// (audit).

// auth knows the gateway's tokens: the node API's and each agent's.
type auth struct {
	tokens []agentToken
}

type agentToken struct {
	sum   [32]byte
	agent string
}

func newAuth(node string, agents map[string]string) *auth {
	a := &auth{}
	if node != "" {
		a.tokens = append(a.tokens, agentToken{sha256.Sum256([]byte(node)), NodeAgent})
	}
	for tok, name := range agents {
		a.tokens = append(a.tokens, agentToken{sha256.Sum256([]byte(tok)), name})
	}
	return a
}

// agent is the agent r's bearer token names ("" when none does). Every
// token is compared, each in constant time over the hashes: neither
// which one matched nor a length leaks.
func (a *auth) agent(r *http.Request) string {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	sum := sha256.Sum256([]byte(got))
	found := ""
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 && ok {
			found = t.agent
		}
	}
	return found
}

// audit is the record of every tool call and tools/list (the tool
// BIZ_TYPE/tools/list): botctl_mcp_tool_calls_total,
// botctl_mcp_tool_call_duration_seconds and one log line, naming the
// bot, the agent, the tool, the outcome and the duration, never the
// arguments or the result.
type audit struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	log      zerolog.Logger
}

func newAudit(reg prometheus.Registerer, log zerolog.Logger) *audit {
	a := &audit{log: log,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "mcp_tool_calls_total",
			Help: "WeCom MCP tool calls and lists this node's gateway answered, by bot, agent, tool (BIZ_TYPE/TOOL, or BIZ_TYPE/tools/list for a list) and outcome: ok, wecom_error, refused (not in ai.tools), unavailable (no URL shared), failed (WeCom's server)."},
			[]string{"bot", "agent", "tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metrics.Namespace, Name: "mcp_tool_call_duration_seconds",
			Help: "How long the WeCom MCP tool calls and lists this node's gateway answered took, by bot and outcome.", Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 10)},
			[]string{"bot", "outcome"}),
	}
	if reg != nil {
		reg.MustRegister(a.calls, a.duration)
	}
	return a
}

// toolLabelRE is a tool's name as the metric keeps it; any other name
// (an agent's guess) is counted as "invalid", so that the label's values
// stay few.
var toolLabelRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

func (a *audit) record(c toolCall, outcome string, took time.Duration, err error) {
	tool := c.biz + "/" + c.tool
	if !toolLabelRE.MatchString(c.biz) || (!toolLabelRE.MatchString(c.tool) && c.tool != ListTool) {
		tool = "invalid"
	}
	a.calls.WithLabelValues(c.bot, c.agent, tool, outcome).Inc()
	a.duration.WithLabelValues(c.bot, outcome).Observe(took.Seconds())
	ev := a.log.Info()
	if outcome == OutcomeRefused || outcome == OutcomeFailed || outcome == OutcomeUnavailable {
		ev = a.log.Warn().AnErr("error", err)
	}
	ev.Str("bot", c.bot).Str("agent", c.agent).Str("tool", tool).Str("outcome", outcome).
		Dur("duration", took).Msg("mcp tool call")
}
