package ai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	sse "github.com/tmaxmax/go-sse"
)

// What the dify and http backends share: one POST with a bearer secret,
// its answer's status classified, a reader of server-sent events, and the
// secret and the URL's path kept out of every error and Name.

const (
	// webMaxErrorBody bounds what is read of a refusal's body.
	webMaxErrorBody = 4 << 10
	// webMaxErrorText bounds the server's message quoted in an error.
	webMaxErrorText = 300
	// sseMaxEvent bounds one event of an event stream: an event is one
	// delta, far below it; a longer one is a broken server, not an answer.
	sseMaxEvent = 1 << 20
	// sessionCallTimeout bounds one read or write of a Sessions store.
	sessionCallTimeout = 10 * time.Second
)

// web is one endpoint of a backend.
type web struct {
	name       string // Name(): the kind and the endpoint's host
	endpoint   string
	secret     string // sent as "Authorization: Bearer …"; "" none
	secretKey  string // the config key holding the secret, named on a 401 or 403
	timeout    time.Duration
	timeoutKey string // the config key of timeout, named on ErrTimeout
	client     *http.Client
}

// newWeb describes endpoint for kind. Only the host of endpoint appears in
// Name and errors: a webhook's path may be its secret (n8n's is).
func newWeb(kind, endpoint, secret, secretKey string, timeout time.Duration, timeoutKey string) (web, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return web{}, fmt.Errorf("%s: endpoint is not a URL", kind)
	}
	// A transport of its own, not shared with the rest of the node; the
	// answer's timeout is the context's. Redirects are not followed: a
	// POST would turn into a GET on 301/302, and the question could be
	// sent on to plain http; a moved endpoint is configuration to fix.
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return web{name: kind + ":" + u.Host, endpoint: endpoint, secret: secret, secretKey: secretKey,
		timeout: timeout, timeoutKey: timeoutKey, client: client}, nil
}

// statusError is an answer other than 2xx.
type statusError struct {
	status int
	code   string // the server's error code, if its body said one (Dify's "code")
	text   string // the server's message, bounded and redacted
}

func (e *statusError) Error() string {
	msg := fmt.Sprintf("HTTP %d %s", e.status, http.StatusText(e.status))
	if e.code != "" {
		msg += " (" + e.code + ")"
	}
	if e.text != "" {
		msg += ": " + e.text
	}
	return msg
}

// post sends body as JSON and returns the response to a 2xx; any other
// status is a *statusError, its body read (bounded) and closed.
func (w web) post(ctx context.Context, body any, accept string) (*http.Response, error) {
	return w.postWith(ctx, body, accept, nil)
}

// postWith is post with header's fields added to the request.
func (w web) postWith(ctx context.Context, body any, accept string, header http.Header) (*http.Response, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: encode the request: %v", ErrBadRequest, w.name, err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, w.endpoint, bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadRequest, w.name, w.redact(err.Error()))
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", accept)
	for k, v := range header {
		hreq.Header[k] = v
	}
	if w.secret != "" {
		hreq.Header.Set("Authorization", "Bearer "+w.secret)
	}
	resp, err := w.client.Do(hreq)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(io.LimitReader(resp.Body, webMaxErrorBody))
	se := &statusError{status: resp.StatusCode}
	se.code, se.text = errorBody(text)
	se.code, se.text = w.bound(se.code), w.bound(se.text)
	return nil, se
}

// errorBody is the code and message of a refusal's body: Dify's
// {"code", "message", "status"}, the common {"error": "…"} or
// {"error": {"message": …}}, else the text itself.
func errorBody(b []byte) (code, text string) {
	var j struct {
		Code    string          `json:"code"`
		Message string          `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &j) == nil {
		if j.Message != "" {
			return j.Code, j.Message
		}
		var s string
		if json.Unmarshal(j.Error, &s) == nil && s != "" {
			return j.Code, s
		}
		var o struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(j.Error, &o) == nil && o.Message != "" {
			return j.Code, o.Message
		}
	}
	return "", string(b)
}

// mediaType is the response's content type without parameters.
func mediaType(resp *http.Response) string {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return mt
}

// classify maps a failed request or stream to ctx.Err() or one of the
// sentinels: the caller's context ending is not the backend's failure; the
// backend's own timeout is ErrTimeout; 5xx, 408, 409 and 429 may pass
// (ErrBackend), other 4xx will not (ErrBadRequest); anything else (refused,
// cut, reset, a broken stream) is ErrBackend.
func (w web) classify(ctx, runCtx context.Context, req Request, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if context.Cause(runCtx) == errAnswerTimeout {
		return fmt.Errorf("%w: %s: task %s: no complete answer within %s (%s)", ErrTimeout, w.name, req.TaskID, w.timeout, w.timeoutKey)
	}
	var se *statusError
	if errors.As(err, &se) {
		switch s := se.status; {
		case s == http.StatusUnauthorized || s == http.StatusForbidden:
			hint := "the endpoint wants a token: set " + w.secretKey
			if w.secret != "" {
				hint = "check the secret in " + w.secretKey
			}
			return fmt.Errorf("%w: %s: task %s: %s; %s", ErrBadRequest, w.name, req.TaskID, se, hint)
		case s == http.StatusRequestTimeout || s == http.StatusConflict || s == http.StatusTooManyRequests || s >= 500:
			return fmt.Errorf("%w: %s: task %s: %s", ErrBackend, w.name, req.TaskID, se)
		case s >= 400:
			return fmt.Errorf("%w: %s: task %s: %s", ErrBadRequest, w.name, req.TaskID, se)
		case s >= 300:
			return fmt.Errorf("%w: %s: task %s: %s; redirects are not followed: set the URL it points to", ErrBadRequest, w.name, req.TaskID, se)
		}
		return fmt.Errorf("%w: %s: task %s: %s", ErrBackend, w.name, req.TaskID, se)
	}
	if errors.Is(err, ErrBackend) || errors.Is(err, ErrBadRequest) || errors.Is(err, ErrTimeout) {
		return err // classified where it was found
	}
	if errors.Is(err, bufio.ErrTooLong) {
		return fmt.Errorf("%w: %s: task %s: an event of the event stream is longer than %d bytes", ErrBackend, w.name, req.TaskID, sseMaxEvent)
	}
	// A *url.Error's text holds the whole URL: keep its operation and cause.
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = ue.Op + " " + w.name + ": " + ue.Err.Error()
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		msg = "the connection was cut mid-answer (" + msg + ")"
	}
	return fmt.Errorf("%w: %s: task %s: %s", ErrBackend, w.name, req.TaskID, w.redact(msg))
}

// redact removes the secret, should a server echo it, and the endpoint's
// path, should an error quote the URL.
func (w web) redact(s string) string {
	if len(w.secret) >= 6 { // shorter is no secret, and would mangle the text
		s = strings.ReplaceAll(s, w.secret, "[redacted]")
	}
	if u, err := url.Parse(w.endpoint); err == nil && u.Path != "" && u.Path != "/" {
		s = strings.ReplaceAll(s, w.endpoint, u.Scheme+"://"+u.Host+"/[path]")
		if len(u.Path) >= 6 { // shorter would mangle the text
			s = strings.ReplaceAll(s, u.Path, "/[path]")
		}
	}
	return s
}

// bound is redact, trimmed and cut to webMaxErrorText bytes.
func (w web) bound(s string) string {
	s = strings.TrimSpace(w.redact(s))
	if len(s) > webMaxErrorText {
		s = strings.ToValidUTF8(s[:webMaxErrorText], "") + "…"
	}
	return s
}

// sseEvents reads a text/event-stream as the HTML specification's
// event-stream interpretation does (go-sse's reader): lines end in LF, CR
// or CRLF; a leading BOM is dropped; an event's data lines are joined with
// LF and the event is dispatched only at the blank line ending it (a
// pending event at the end of the stream is discarded); comments, id and
// retry are not events. An event without data (Dify's "event: ping") is
// not yielded. The sequence ends at the stream's end; a read error is
// yielded once (a cut connection: io.ErrUnexpectedEOF; an event longer
// than sseMaxEvent: bufio.ErrTooLong).
func sseEvents(r io.Reader) iter.Seq2[sse.Event, error] {
	return func(yield func(sse.Event, error) bool) {
		for ev, err := range sse.Read(r, &sse.ReadConfig{MaxEventSize: sseMaxEvent}) {
			if err == nil && ev.Data == "" {
				continue
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// recordEmit wraps emit so that the caller can tell emit's error, which
// Stream returns unchanged, from the stream's.
type recordEmit struct {
	emit func(string) error
	err  error
	any  bool // something was emitted
	// usage is what the stream said the answer cost, if it did (usage.go).
	usage *usageObject
}

func (r *recordEmit) send(d string) error {
	if d == "" {
		return nil
	}
	r.any = true
	if err := r.emit(d); err != nil {
		r.err = err
		return err
	}
	return nil
}
