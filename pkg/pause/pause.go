// Package pause is the one context-aware wait of botctl's loops: the
// backoff before a retry, a poll's interval, a pacing delay. A node that
// stops ends every such wait at once.
package pause

import (
	"context"
	"time"
)

// For waits d, or until ctx ends, and reports whether the whole of d
// passed (false: ctx ended first; the caller checks ctx, or returns).
func For(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
