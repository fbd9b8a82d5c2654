package jetstream

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// memoryKV is a bucket in memory storage (the progress bucket) that a
// call finding it gone declares again, then tries once more. A NATS
// server that is not clustered forgets a memory stream when it restarts
// (a cluster's meta layer keeps the stream's assignment and makes it
// again, empty), so without this the bucket would be gone until a node
// declared it at its next start: every write of an answer in progress
// would fail, and the pusher's watch of them with it. What the bucket
// held is lost either way; that is what memory storage is for here (see
// Declare).
type memoryKV struct {
	natsjs.KeyValue
	js  natsjs.JetStream
	cfg natsjs.KeyValueConfig

	mu       sync.Mutex
	declared time.Time // the last declare, at most one a second
}

// bucketGone: err is what a call on a bucket whose stream does not exist
// returns (a read's request has no responder, a write's publish no
// stream's answer, a watch or status the API's "stream not found").
func bucketGone(err error) bool {
	return err != nil && (errors.Is(err, natsjs.ErrStreamNotFound) || errors.Is(err, natsjs.ErrBucketNotFound) ||
		errors.Is(err, natsjs.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders))
}

// again reports whether a call that failed with err is worth one more
// try: the bucket was gone, and is declared again (by this call, or by
// another within the last second).
func (m *memoryKV) again(ctx context.Context, err error) bool {
	if !bucketGone(err) {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if time.Since(m.declared) < time.Second {
		return true
	}
	m.declared = time.Now()
	var kept []Mismatch // found at Declare already
	_, derr := declareBucketConfig(ctx, m.js, m.cfg, &kept)
	return derr == nil
}

// retry is memoryKV's policy for each call: once more when the bucket
// was gone and is declared again.
func (m *memoryKV) retry(ctx context.Context, call func(context.Context) error) error {
	err := call(ctx)
	if m.again(ctx, err) {
		err = call(ctx)
	}
	return err
}

func (m *memoryKV) Get(ctx context.Context, key string) (natsjs.KeyValueEntry, error) {
	return through(ctx, m.retry, func(ctx context.Context) (natsjs.KeyValueEntry, error) { return m.KeyValue.Get(ctx, key) })
}

func (m *memoryKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return through(ctx, m.retry, func(ctx context.Context) (uint64, error) { return m.KeyValue.Put(ctx, key, value) })
}

func (m *memoryKV) Create(ctx context.Context, key string, value []byte, opts ...natsjs.KVCreateOpt) (uint64, error) {
	return through(ctx, m.retry, func(ctx context.Context) (uint64, error) { return m.KeyValue.Create(ctx, key, value, opts...) })
}

func (m *memoryKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	return through(ctx, m.retry, func(ctx context.Context) (uint64, error) { return m.KeyValue.Update(ctx, key, value, last) })
}

func (m *memoryKV) Delete(ctx context.Context, key string, opts ...natsjs.KVDeleteOpt) error {
	return m.retry(ctx, func(ctx context.Context) error { return m.KeyValue.Delete(ctx, key, opts...) })
}

func (m *memoryKV) Purge(ctx context.Context, key string, opts ...natsjs.KVDeleteOpt) error {
	return m.retry(ctx, func(ctx context.Context) error { return m.KeyValue.Purge(ctx, key, opts...) })
}

func (m *memoryKV) Watch(ctx context.Context, keys string, opts ...natsjs.WatchOpt) (natsjs.KeyWatcher, error) {
	return through(ctx, m.retry, func(ctx context.Context) (natsjs.KeyWatcher, error) { return m.KeyValue.Watch(ctx, keys, opts...) })
}

func (m *memoryKV) WatchAll(ctx context.Context, opts ...natsjs.WatchOpt) (natsjs.KeyWatcher, error) {
	return through(ctx, m.retry, func(ctx context.Context) (natsjs.KeyWatcher, error) { return m.KeyValue.WatchAll(ctx, opts...) })
}

func (m *memoryKV) Status(ctx context.Context) (natsjs.KeyValueStatus, error) {
	return through(ctx, m.retry, func(ctx context.Context) (natsjs.KeyValueStatus, error) { return m.KeyValue.Status(ctx) })
}
