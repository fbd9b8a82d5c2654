package alert

import (
	"context"
	"encoding/json"
	"fmt"
)

// Webhook posts each alert as JSON (the Alert shape, docs/alerts.md) to a
// URL. A 2xx answer is success; 429, 5xx and network errors are retried;
// any other status is a refusal, given up at once.
type Webhook struct{ *httpSink }

// NewWebhook is a sink for url. Any secret in the url (query, user info)
// is never logged.
func NewWebhook(url string, opts ...Option) *Webhook {
	return &Webhook{newHTTPSink("webhook", url, opts)}
}

// Send posts a.
func (w *Webhook) Send(ctx context.Context, a Alert) error {
	body, err := json.Marshal(a)
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
	return nil
}
