package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"
)

// WeCom group robot limits.
const (
	// WeComMaxContent is the robot's limit on markdown content, in bytes.
	WeComMaxContent = 4096
	// WeComRateLimited is the errcode of a robot over its rate limit.
	WeComRateLimited = 45009
	// WeComPerMinute is the robot's rate: about 20 messages a minute.
	WeComPerMinute = 20
)

// Option configures a sink made by NewWeComRobot or NewWebhook.
type Option func(*httpSink)

// WithHTTPClient sends with c (default: a client without a timeout of its
// own; the Alerter bounds each attempt with Config.Timeout).
func WithHTTPClient(c *http.Client) Option { return func(s *httpSink) { s.client = c } }

// WithRate paces sends at r with burst b (default for the WeCom robot:
// WeComPerMinute a minute, burst 1, so no minute holds more than 20;
// default for a webhook: unlimited).
func WithRate(r rate.Limit, b int) Option {
	return func(s *httpSink) { s.limiter = rate.NewLimiter(r, b) }
}

// WithName names the sink in logs (default: its kind and redacted URL).
func WithName(name string) Option { return func(s *httpSink) { s.name = name } }

type httpSink struct {
	url      string // with its key: never logged
	redacted string
	name     string
	client   *http.Client
	limiter  *rate.Limiter
}

func newHTTPSink(kind, u string, opts []Option) *httpSink {
	s := &httpSink{url: u, redacted: RedactURL(u), client: &http.Client{}}
	s.name = kind + " " + s.redacted
	for _, o := range opts {
		o(s)
	}
	return s
}

func (s *httpSink) Name() string { return s.name }

// post sends body and returns the response's status and (bounded) body.
func (s *httpSink) post(ctx context.Context, body []byte) (int, []byte, error) {
	if s.limiter != nil {
		if err := s.limiter.Wait(ctx); err != nil {
			return 0, nil, fmt.Errorf("%s: wait for the rate limit: %w", s.name, err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", s.name, ErrPermanent) // the error would quote the URL
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", s.name, scrubURLError(err, s.redacted))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s: read response: %w", s.name, scrubURLError(err, s.redacted))
	}
	return resp.StatusCode, raw, nil
}

// httpStatusErr classifies a non-2xx status: 429 and 5xx are retried,
// any other status is a refusal.
func (s *httpSink) httpStatusErr(code int, body []byte) error {
	snippet := strings.TrimSpace(string(body))
	if len(snippet) > 200 {
		snippet = snippet[:200]
	}
	switch {
	case code == http.StatusTooManyRequests:
		return fmt.Errorf("%s: HTTP %d: %w", s.name, code, ErrRateLimited)
	case code >= 500:
		return fmt.Errorf("%s: HTTP %d %s", s.name, code, snippet)
	default:
		return fmt.Errorf("%s: HTTP %d %s: %w", s.name, code, snippet, ErrPermanent)
	}
}

// WeComRobot posts alerts as markdown to a WeCom group robot
// (https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=…).
type WeComRobot struct{ *httpSink }

// NewWeComRobot is a sink for the group robot at url. The url's key is
// never logged (RedactURL).
func NewWeComRobot(url string, opts ...Option) *WeComRobot {
	s := newHTTPSink("wecom_robot", url, append([]Option{WithRate(rate.Every(time.Minute/WeComPerMinute), 1)}, opts...))
	return &WeComRobot{s}
}

// Send posts a as {"msgtype":"markdown","markdown":{"content":…}}. The
// robot answers HTTP 200 with {"errcode":0,"errmsg":"ok"}; a nonzero
// errcode is a failure, 45009 a rate limit.
func (w *WeComRobot) Send(ctx context.Context, a Alert) error {
	body, err := json.Marshal(map[string]any{
		"msgtype":  "markdown",
		"markdown": map[string]string{"content": Markdown(a)},
	})
	if err != nil {
		return fmt.Errorf("%s: %w: %w", w.name, ErrPermanent, err)
	}
	code, raw, err := w.post(ctx, body)
	if err != nil {
		return err
	}
	if code/100 != 2 {
		return w.httpStatusErr(code, raw)
	}
	var r struct {
		ErrCode int    `json:"errcode"`
		ErrMsg  string `json:"errmsg"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("%s: unreadable answer: %w", w.name, err)
	}
	switch {
	case r.ErrCode == 0:
		return nil
	case r.ErrCode == WeComRateLimited:
		return fmt.Errorf("%s: errcode %d %s: %w", w.name, r.ErrCode, r.ErrMsg, ErrRateLimited)
	default:
		// Retried: most errcodes are transient or fixed by an operator
		// within the retry span; MaxAttempts bounds it.
		return fmt.Errorf("%s: errcode %d %s", w.name, r.ErrCode, r.ErrMsg)
	}
}

// Markdown renders a for the WeCom robot, at most WeComMaxContent bytes:
// a longer text is cut at a line (or at least a rune) boundary and marked.
func Markdown(a Alert) string {
	var b strings.Builder
	color := "info"
	if a.Level == "human" {
		color = "warning"
	}
	fmt.Fprintf(&b, "**<font color=\"%s\">[%s] %s</font>** %s\n", color, strings.ToUpper(string(a.Level)), a.Kind, mdEscape(a.Summary))
	fmt.Fprintf(&b, "> Next: %s\n", mdEscape(a.NextAction))
	if a.CommonCause != "" {
		fmt.Fprintf(&b, "> Common cause: %s\n", mdEscape(a.CommonCause))
	}
	for _, in := range a.Instances {
		fmt.Fprintf(&b, "- `%s` owner %s, %s: %s", in.Bot, mdEscape(in.Owner), in.Signal, mdEscape(in.Reason))
		if in.DowntimeSeconds > 0 {
			fmt.Fprintf(&b, ", down %s", (time.Duration(in.DowntimeSeconds) * time.Second).String())
		}
		fmt.Fprintf(&b, " (%s)\n", in.Incident)
	}
	fmt.Fprintf(&b, "<font color=\"comment\">%s · %s</font>", a.ID, a.At.UTC().Format(time.RFC3339))
	return Truncate(b.String(), WeComMaxContent)
}

const truncMark = "\n…(truncated)"

// Truncate cuts s to at most max bytes, at the last line break that
// keeps half of it, else at a rune boundary, and marks the cut.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max - len(truncMark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if nl := strings.LastIndexByte(s[:cut], '\n'); nl >= cut/2 {
		cut = nl
	}
	return s[:cut] + truncMark
}

// mdEscape keeps a value from breaking the markdown line it is on.
func mdEscape(s string) string {
	return strings.NewReplacer("\n", " ", "\r", " ", "<", "‹", ">", "›").Replace(s)
}
