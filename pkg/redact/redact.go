// Package redact removes credentials from text before it is logged, shown or
// returned as an error: the user:password part of any URL
// (nats://u:p@host → nats://<redacted>@host) and the value of any query
// parameter whose name says it carries a secret (?key=, token=, secret=,
// password=, sig=, auth…=, cred…=).
//
// It is the one place this is done: the process logger's writer, the
// process's last error line, and the errors that wrap a configured URL
// (NATS URL, etcd endpoints, WeCom URL, history URL, webhooks) all go
// through String. What it guarantees: a credential written in one of those
// two URL forms never reaches a log line or an error printed by botctl.
// What it does not: a secret written some other way (a bare token in free
// text) is not recognised; keep secrets out of messages in the first place.
package redact

import (
	"io"
	"regexp"
)

// Mask replaces what is removed.
const Mask = "<redacted>"

var (
	// scheme://userinfo@ : userinfo holds no '/', '?', '#', '@' or space.
	userinfoRE = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s"'<>\\]+@`)
	// ?name=value or &name=value where name mentions a secret.
	queryRE = regexp.MustCompile(`(?i)([?&;][a-z0-9_.\-]*(?:key|token|secret|passw|pwd|sig|auth|cred)[a-z0-9_.\-]*=)[^&#\s"'<>\\]*`)
)

// String is s with every URL credential replaced by Mask.
func String(s string) string {
	s = userinfoRE.ReplaceAllString(s, "${1}"+Mask+"@")
	return queryRE.ReplaceAllString(s, "${1}"+Mask)
}

// URL is String for one URL (or a comma-separated list of them).
func URL(u string) string { return String(u) }

// URLs redacts each of us.
func URLs(us []string) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = String(u)
	}
	return out
}

// Error is err with its message redacted; errors.Is and errors.As still see
// the original chain. nil stays nil.
func Error(err error) error {
	if err == nil {
		return nil
	}
	return redacted{err}
}

type redacted struct{ err error }

func (r redacted) Error() string { return String(r.err.Error()) }
func (r redacted) Unwrap() error { return r.err }

// Writer redacts every write before passing it to w. zerolog writes one
// event per Write, so each log line is redacted whole.
func Writer(w io.Writer) io.Writer { return writer{w} }

type writer struct{ w io.Writer }

func (w writer) Write(p []byte) (int, error) {
	s := String(string(p))
	if _, err := io.WriteString(w.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}
