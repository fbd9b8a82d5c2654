package pusher

// Reconnects: what the pusher was told while its NATS connection was away
// may be lost, so a reconnect makes everything it cached stale.

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// followReconnects calls reconnected each time the node's NATS connection
// comes back (a server left for another: frozen, killed, restarted), until
// ctx ends.
//
// While the connection was away, a notice (core NATS, published by the
// worker that ended a task) was lost for good: the ending waited for the
// record's refresh (refreshEvery, 30 s), so the final frame of an answer
// that ended during a NATS server's freeze reached the user 20 s late. And
// the output watch's consumer may live on the server that was left: its
// ordered consumer notices only after two missed heartbeats (10 s) and is
// then made again. A reconnect is rare and the reads it costs are one per
// active task, once.
func (p *Pusher) followReconnects(ctx context.Context) {
	nc := p.cfg.Store.JetStream().Conn()
	back := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(back)
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-back:
			if !ok {
				return
			}
			p.reconnected()
		}
	}
}

// linked is ctx, canceled also when the NATS connection next comes back: a
// request in flight when the connection left its server is never answered
// (nats.go does not fail it on a reconnect), and held its step, and so the
// task's next frame, until the step's timeout: the final frames of answers
// that ended in the first seconds after a NATS server froze reached users
// at the freeze's 31st second. Only store calls are linked: a WeCom send
// is not cut short (a final frame of unknown outcome is sent again).
func (p *Pusher) linked(ctx context.Context) (context.Context, context.CancelFunc) {
	p.mu.Lock()
	link := p.link.ctx
	p.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(link, cancel)
	return ctx, func() { stop(); cancel() }
}

// reconnected forgets the cached records and outputs of every active task
// (each next step reads both), moves them ahead of the scan, ends the
// store calls in flight (linked), and makes the output watch again from
// the last revision it delivered.
func (p *Pusher) reconnected() {
	p.mu.Lock()
	for _, en := range p.active {
		en.readAt, en.outAt, en.urgent = time.Time{}, time.Time{}, true
	}
	n := len(p.active)
	p.stats.Reconnects++
	end := p.link.end
	p.link.ctx, p.link.end = context.WithCancel(context.Background())
	p.mu.Unlock()
	end()
	ring(p.in.rewatch)
	p.log.Info().Int("tasks", n).Msg("NATS reconnected: every active task's record and output are read again, the output watch is made again")
	ring(p.in.wake)
}
