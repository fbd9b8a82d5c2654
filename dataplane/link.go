package dataplane

// The link: KV calls in flight when the NATS connection leaves its server
// end at the reconnect, and whoever waits for a reconnect hears of it
// (Store.Reconnected).

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrAbandoned is what a KV call in flight when the NATS connection came
// back returns (wrapping nats.ErrTimeout: it was never answered, and
// every caller already treats a timeout as the store failing). Its
// request went to the server the connection left (frozen, killed,
// restarted), which never answers it, and nats.go does not fail requests
// in flight on a reconnect: each waited for its context's deadline. In
// the chaos suite's NATS scenarios the pusher's steps and the workers'
// record writes so held for 10-30 s after the reconnect, and the final
// frames of answers that ended then reached users that late.
var ErrAbandoned = fmt.Errorf("request abandoned at a NATS reconnect (the server it went to never answers): %w", nats.ErrTimeout)

// link is canceled, and replaced, each time the connection comes back:
// the one follower of the store's connection's reconnects.
type link struct {
	mu  sync.Mutex
	ctx context.Context
	end context.CancelFunc
}

// followLink follows nc's reconnects until nc is closed.
func followLink(nc *nats.Conn) *link {
	l := &link{}
	l.ctx, l.end = context.WithCancel(context.Background())
	if nc == nil {
		return l
	}
	back := nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	go func() {
		for st := range back {
			if st == nats.CLOSED {
				nc.RemoveStatusListener(back)
				return
			}
			l.mu.Lock()
			end := l.end
			l.ctx, l.end = context.WithCancel(context.Background())
			l.mu.Unlock()
			end()
		}
	}()
	return l
}

// Reconnected returns a channel closed when the store's NATS connection
// next comes back (a server left for another: frozen, killed, restarted;
// the same status change as nats.go's StatusChanged(CONNECTED)); after
// each reconnect a fresh channel is handed out.
//
// No reconnect is missed between two reads of the channel: the channel
// closes when the reconnect happens, whether anyone is waiting on it then
// or not, and stays closed. So a waiter that takes the channel, then does
// work, then waits on that same channel sees a reconnect that happened
// during its work. One that acts on each reconnect takes the next channel
// before it acts (the close, then Reconnected again, then the action):
// a reconnect during the action then closes the channel it waits on next.
// Reconnects that follow each other before a waiter takes the next
// channel close it once: a waiter hears "at least one since you took
// it", never how many. The channel may also close for a reconnect just
// before the call that the store heard of a moment late: a waiter may
// act once more than needed, never once less.
//
// The channel is closed at the same moment KV calls in flight end with
// ErrAbandoned. It never closes once the connection is closed for good
// (wait on a context beside it), nor on a Store not made by Declare (nil).
func (s *Store) Reconnected() <-chan struct{} {
	if s.link == nil {
		return nil
	}
	return s.link.next()
}

// next is closed at the next reconnect.
func (l *link) next() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ctx.Done()
}

// bind is ctx, ended also by the next reconnect; abandoned reports
// whether that is what ended it.
func (l *link) bind(ctx context.Context) (bound context.Context, abandoned func() bool, unbind func()) {
	l.mu.Lock()
	lctx := l.ctx
	l.mu.Unlock()
	bound, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(lctx, cancel)
	return bound, func() bool { return lctx.Err() != nil && ctx.Err() == nil }, func() { stop(); cancel() }
}

// linkedKV is a bucket whose calls (those botctl makes on its hot paths:
// reads and writes) end with ErrAbandoned at a reconnect.
type linkedKV struct {
	jetstream.KeyValue
	l *link
}

func linked[T any](l *link, ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	bound, abandoned, unbind := l.bind(ctx)
	defer unbind()
	v, err := call(bound)
	if err != nil && abandoned() && errors.Is(err, context.Canceled) {
		return v, ErrAbandoned // ended by the reconnect, not by an answer
	}
	return v, err
}

func (kv linkedKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	return linked(kv.l, ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return kv.KeyValue.Get(ctx, key) })
}

func (kv linkedKV) GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error) {
	return linked(kv.l, ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) {
		return kv.KeyValue.GetRevision(ctx, key, revision)
	})
}

func (kv linkedKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return linked(kv.l, ctx, func(ctx context.Context) (uint64, error) { return kv.KeyValue.Put(ctx, key, value) })
}

func (kv linkedKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	return linked(kv.l, ctx, func(ctx context.Context) (uint64, error) { return kv.KeyValue.Create(ctx, key, value, opts...) })
}

func (kv linkedKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	return linked(kv.l, ctx, func(ctx context.Context) (uint64, error) { return kv.KeyValue.Update(ctx, key, value, revision) })
}

func (kv linkedKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	_, err := linked(kv.l, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, kv.KeyValue.Delete(ctx, key, opts...) })
	return err
}

func (kv linkedKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	_, err := linked(kv.l, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, kv.KeyValue.Purge(ctx, key, opts...) })
	return err
}
