package worker

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/task"
)

// coalescer accumulates deltas and writes the whole text at most once per
// interval (and only if it changed), so a backend emitting hundreds of
// tokens a second costs a few KV writes, and a backend that goes quiet
// still has its last words written within an interval. Writes go through
// the attempt's fenced writer; onErr hears of each failed write, periodic
// or the last (ErrSuperseded ends the run), but not of a periodic write
// the run's end cut short.
type coalescer struct {
	w     *task.OutputWriter
	onErr func(error)

	mu    sync.Mutex
	b     strings.Builder
	dirty bool
	wmu   sync.Mutex // one write at a time, in order

	stop func()
}

func newCoalescer(ctx context.Context, w *task.OutputWriter, interval time.Duration, onErr func(error)) *coalescer {
	c := &coalescer{w: w, onErr: onErr}
	c.stop = every(ctx, interval, func(ctx context.Context) bool {
		wctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
		defer cancel()
		if err := c.write(wctx); err != nil && ctx.Err() == nil {
			c.onErr(err)
		}
		return true
	})
	return c
}

func (c *coalescer) add(delta string) error {
	c.mu.Lock()
	c.b.WriteString(delta)
	c.dirty = true
	c.mu.Unlock()
	return nil
}

func (c *coalescer) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// flush writes the text if it changed since the last write; onErr hears
// of a failure.
func (c *coalescer) flush(ctx context.Context) error {
	err := c.write(ctx)
	if err != nil {
		c.onErr(err)
	}
	return err
}

// write writes the text if it changed since the last write.
func (c *coalescer) write(ctx context.Context) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if !c.dirty {
		c.mu.Unlock()
		return nil
	}
	text := c.b.String()
	c.dirty = false
	c.mu.Unlock()
	if err := c.w.Write(ctx, text); err != nil {
		c.mu.Lock()
		c.dirty = true
		c.mu.Unlock()
		return err
	}
	return nil
}

// end stops the periodic writes; then flush writes the last.
func (c *coalescer) end() { c.stop() }
