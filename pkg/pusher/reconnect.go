package pusher

// Reconnects: what the pusher was told while its NATS connection was away
// may be lost, so a reconnect makes everything it cached stale.

import (
	"context"
	"time"
)

// followReconnects calls reconnected each time the node's NATS connection
// comes back (a server left for another: frozen, killed, restarted), until
// ctx ends. The store tells it (jetstream's Store.Reconnected, the one
// follower of the connection's reconnects); the next channel is taken
// before reconnected runs, so a reconnect during it is heard too.
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
	back := p.store.Reconnected()
	for {
		select {
		case <-ctx.Done():
			return
		case <-back:
			back = p.store.Reconnected()
			p.reconnected()
		}
	}
}

// reconnected forgets the cached records and outputs of every active task
// (each next step reads both), moves them ahead of the scan, and makes the
// output watch again from the last revision it delivered. (The store
// calls of steps in flight end at the reconnect too: jetstream's
// ErrAbandoned.)
func (p *Pusher) reconnected() {
	p.mu.Lock()
	for _, en := range p.active {
		en.readAt, en.outAt, en.urgent = time.Time{}, time.Time{}, true
	}
	n := len(p.active)
	p.due.all = true
	p.stats.Reconnects++
	p.mu.Unlock()
	ring(p.in.rewatch)
	p.log.Info().Int("tasks", n).Msg("NATS reconnected: every active task's record and output are read again, the output watch is made again")
	ring(p.in.wake)
}
