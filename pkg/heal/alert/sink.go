package alert

import (
	"context"
	"errors"
	"net/url"
)

// Sink delivers alerts somewhere a person or a tool reads them. Send is
// one attempt: the Alerter retries, paces and bounds it (Config.MaxAttempts,
// Timeout, Backoff, QueueSize). Send must honour ctx and must never put a
// secret (a webhook key) in its error.
type Sink interface {
	// Name identifies the sink in logs; it contains no secret.
	Name() string
	Send(ctx context.Context, a Alert) error
}

// Outcomes of Sink.Send besides nil. An error wrapping none of them is
// taken as transient (network, timeout) and retried.
var (
	// ErrPermanent: retrying cannot help (the receiver refused the alert:
	// a 4xx other than 429, a malformed URL, an errcode meaning a bad
	// key). The alert is given up at once and logged.
	ErrPermanent = errors.New("alert refused for good")
	// ErrRateLimited: the receiver asked to slow down (HTTP 429, WeCom
	// errcode 45009). Retried after backoff like a transient failure.
	ErrRateLimited = errors.New("alert rate limited")
)

// RedactURL returns u without its secrets: every query value and any
// password are replaced with REDACTED (a WeCom robot URL carries its key
// in ?key=). An unparsable URL is redacted whole.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "REDACTED-URL"
	}
	if p.User != nil {
		p.User = url.User("REDACTED") // a user name in a URL is a token as often as not
	}
	if p.RawQuery != "" {
		q := p.Query()
		for k := range q {
			q[k] = []string{"REDACTED"}
		}
		p.RawQuery = q.Encode()
	}
	p.Fragment = ""
	return p.String()
}

// scrubURLError replaces the URL net/http puts in its errors ("Post
// \"https://…?key=…\": dial tcp: …") with the redacted one.
func scrubURLError(err error, redacted string) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return &url.Error{Op: ue.Op, URL: redacted, Err: ue.Err}
	}
	return err
}
