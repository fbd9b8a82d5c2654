package config

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// What happens when a bot's AI backend fails (pkg/ai's Chain): a backend
// that fails before the first token of its answer is replaced by the
// next of ai.fallback for the same answer; one that failed
// ai.breaker.failures times in a row is skipped for ai.breaker.cooldown.

// AIBackend is one backend's keys: its kind and the section of that
// kind. An ai section's own kind and sections are its first backend
// (Primary); each ai.fallback entry is one more, tried in order. An
// entry stands alone: it inherits nothing from the ai section's
// sections (a fallback to another provider must not be sent the first
// one's key), only the backends' defaults.
type AIBackend struct {
	Kind   string   `yaml:"kind"`
	Demo   AIDemo   `yaml:"demo"`
	Exec   AIExec   `yaml:"exec"`
	OpenAI AIOpenAI `yaml:"openai"`
	Dify   AIDify   `yaml:"dify"`
	HTTP   AIHTTP   `yaml:"http"`
}

// AIBreaker is ai.breaker: a backend that failed Failures times in a row
// (before or after its first token) is skipped, on this node, for
// Cooldown; then one answer is let through to probe it (half-open): its
// first token closes the breaker, its failure opens it for another
// Cooldown.
type AIBreaker struct {
	// Failures in a row that open the breaker. Default
	// DefaultBreakerFailures; 0: no breaker (the backend is always tried);
	// at most 1000. Lower skips a failing backend sooner (and a backend
	// with a bad minute longer); higher spends more answers, each waiting
	// for its failure, before skipping it.
	Failures int `yaml:"failures"`
	// Cooldown is how long an open breaker skips its backend before the
	// probe. Default DefaultBreakerCooldown; 1s to 1h.
	Cooldown time.Duration `yaml:"cooldown"`
}

// Defaults and bounds of the chain's keys (Defaults sets the top level's).
const (
	// DefaultFirstTokenTimeout is ai.first_token_timeout: a model that
	// has said nothing for a minute is, in practice, not answering (a
	// long prompt takes seconds to its first token, not minutes), and
	// the user has waited long enough to deserve the next backend.
	DefaultFirstTokenTimeout = time.Minute
	MaxFirstTokenTimeout     = time.Hour
	DefaultBreakerFailures   = 5
	MaxBreakerFailures       = 1000
	DefaultBreakerCooldown   = 30 * time.Second
	// MaxFallbacks bounds ai.fallback: each entry is one more wait for a
	// failure before the user is answered.
	MaxFallbacks = 4
)

// Primary is the ai section's own backend: its kind and sections.
func (a AI) Primary() AIBackend {
	return AIBackend{Kind: a.Kind, Demo: a.Demo, Exec: a.Exec, OpenAI: a.OpenAI, Dify: a.Dify, HTTP: a.HTTP}
}

// Backends are the backends in the order they are tried: Primary, then
// ai.fallback.
func (a AI) Backends() []AIBackend { return append([]AIBackend{a.Primary()}, a.Fallback...) }

// With is a with b as its only backend (no fallback): what one backend
// of the chain is built from.
func (a AI) With(b AIBackend) AI {
	a.Kind, a.Demo, a.Exec, a.OpenAI, a.Dify, a.HTTP = b.Kind, b.Demo, b.Exec, b.OpenAI, b.Dify, b.HTTP
	a.Fallback = nil
	return a
}

// FallbackKey names, in err, the key of fallback entry i instead of the
// ai section's ("config key ai.openai.model" becomes "config key
// ai.fallback[1].openai.model"): for errors of a backend built from
// a.With(a.Fallback[i]).
func FallbackKey(err error, i int) error {
	if err == nil {
		return nil
	}
	return errors.New(strings.ReplaceAll(err.Error(), "config key ai.", fmt.Sprintf("config key ai.fallback[%d].", i)))
}

// validateChain checks ai.first_token_timeout, ai.breaker and every
// ai.fallback entry.
func (a AI) validateChain() error {
	var errs []error
	if t := a.FirstTokenTimeout; t < 0 || t > MaxFirstTokenTimeout || t > 0 && t < time.Second {
		errs = append(errs, fmt.Errorf("config key ai.first_token_timeout: %s: want 1s to %s (0: off, the backend's own timeout bounds the wait; unset: %s)",
			t, MaxFirstTokenTimeout, DefaultFirstTokenTimeout))
	}
	if n := a.Breaker.Failures; n < 0 || n > MaxBreakerFailures {
		errs = append(errs, fmt.Errorf("config key ai.breaker.failures: %d: want 1 to %d failures in a row (0: no breaker; unset: %d)", n, MaxBreakerFailures, DefaultBreakerFailures))
	}
	if c := a.Breaker.Cooldown; a.Breaker.Failures > 0 && (c < time.Second || c > time.Hour) {
		errs = append(errs, fmt.Errorf("config key ai.breaker.cooldown: %s: want 1s to 1h (unset: %s)", c, DefaultBreakerCooldown))
	}
	if len(a.Fallback) > MaxFallbacks {
		errs = append(errs, fmt.Errorf("config key ai.fallback: %d entries: at most %d (each is one more failure the user waits for)", len(a.Fallback), MaxFallbacks))
	}
	for i, f := range a.Fallback {
		errs = append(errs, FallbackKey(f.validate(), i))
	}
	return errors.Join(errs...)
}
