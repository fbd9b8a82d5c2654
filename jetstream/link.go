package jetstream

// The link: KV calls in flight when the NATS connection leaves its server
// end at the reconnect, and whoever waits for a reconnect hears of it
// (Store.Reconnected).

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
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

// linkedKV is a bucket whose calls (those botctl makes on its hot paths:
// reads and writes) end with ErrAbandoned at a reconnect. Watches are
// not among them: a watch's context is its subscription's for as long as
// it runs, not one call's.
type linkedKV struct {
	natsjs.KeyValue
	l *link
}

// call is linkedKV's policy for each call: its context ends also at the
// next reconnect, and a call so ended returns ErrAbandoned.
func (l *link) call(ctx context.Context, do func(context.Context) error) error {
	l.mu.Lock()
	lctx := l.ctx
	l.mu.Unlock()
	bound, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(lctx, cancel)()
	err := do(bound)
	if err != nil && lctx.Err() != nil && ctx.Err() == nil && errors.Is(err, context.Canceled) {
		return ErrAbandoned // ended by the reconnect, not by an answer
	}
	return err
}

// through makes a call that returns a value under a wrapper's policy for
// each call (link.call here, memoryKV.retry in memorykv.go): each of
// their methods is this and the bucket's own. The progress bucket has
// both, the link's around the retry's (Declare).
func through[T any](ctx context.Context, policy func(context.Context, func(context.Context) error) error, call func(context.Context) (T, error)) (T, error) {
	var v T
	err := policy(ctx, func(ctx context.Context) (err error) {
		v, err = call(ctx)
		return err
	})
	return v, err
}

func (kv linkedKV) Get(ctx context.Context, key string) (natsjs.KeyValueEntry, error) {
	return through(ctx, kv.l.call, func(ctx context.Context) (natsjs.KeyValueEntry, error) { return kv.KeyValue.Get(ctx, key) })
}

func (kv linkedKV) GetRevision(ctx context.Context, key string, revision uint64) (natsjs.KeyValueEntry, error) {
	return through(ctx, kv.l.call, func(ctx context.Context) (natsjs.KeyValueEntry, error) {
		return kv.KeyValue.GetRevision(ctx, key, revision)
	})
}

func (kv linkedKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return through(ctx, kv.l.call, func(ctx context.Context) (uint64, error) { return kv.KeyValue.Put(ctx, key, value) })
}

func (kv linkedKV) Create(ctx context.Context, key string, value []byte, opts ...natsjs.KVCreateOpt) (uint64, error) {
	return through(ctx, kv.l.call, func(ctx context.Context) (uint64, error) { return kv.KeyValue.Create(ctx, key, value, opts...) })
}

func (kv linkedKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	return through(ctx, kv.l.call, func(ctx context.Context) (uint64, error) { return kv.KeyValue.Update(ctx, key, value, revision) })
}

func (kv linkedKV) Delete(ctx context.Context, key string, opts ...natsjs.KVDeleteOpt) error {
	return kv.l.call(ctx, func(ctx context.Context) error { return kv.KeyValue.Delete(ctx, key, opts...) })
}

func (kv linkedKV) Purge(ctx context.Context, key string, opts ...natsjs.KVDeleteOpt) error {
	return kv.l.call(ctx, func(ctx context.Context) error { return kv.KeyValue.Purge(ctx, key, opts...) })
}
